package kvmdomain

import (
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

const errCordoned = "host %s is cordoned: %s has spec.unschedulable: true, so no new domain is created there (domains already on it keep running); set it to false, or use another host"

// cordoned decides whether a KVMDomain whose domain does not exist on its host may be created
// there: never on a cordoned host (spec.unschedulable of its config). It is asked only at the
// top of Create, so a domain that exists is observed, updated and deleted as before. The managed
// reconciler shows the refusal as Synced=False (ReconcileError, "create failed: host ... is
// cordoned ...") and a CannotCreateExternalResource warning event, and retries with its
// backoff.
func cordoned(unschedulable bool, host, source string) error {
	if !unschedulable {
		return nil
	}
	return errors.Errorf(errCordoned, host, source)
}
