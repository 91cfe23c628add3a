package kvmdomain

import (
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// ReasonHostCordoned is the reason of the Ready condition of a KVMDomain refused because its
// host is cordoned.
const ReasonHostCordoned xpv2.ConditionReason = "HostCordoned"

const errCordoned = "host %s is cordoned: %s has spec.unschedulable: true, so no new domain is created there (domains already on it keep running); set it to false, or use another host"

// cordoned decides whether a KVMDomain whose domain does not exist on its host may be created
// there: never on a cordoned host (spec.unschedulable of its config). It is asked only on the
// way to Create, so a domain that exists is observed, updated and deleted as before.
func cordoned(unschedulable bool, host, source string) error {
	if !unschedulable {
		return nil
	}
	return errors.Errorf(errCordoned, host, source)
}

// cordonedCondition is the Ready condition of a KVMDomain refused by cordoned.
func cordonedCondition(err error) xpv2.Condition {
	c := xpv2.Unavailable().WithMessage(err.Error())
	c.Reason = ReasonHostCordoned
	return c
}
