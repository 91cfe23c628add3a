package netns

import (
	"strings"
	"testing"
)

func TestInsideMissingNamespace(t *testing.T) {
	err := Inside("provider-kvm-no-such-namespace")
	if err == nil || !strings.Contains(err.Error(), "network namespace provider-kvm-no-such-namespace does not exist") {
		t.Errorf("Inside(a namespace that does not exist) = %v, want it named as missing", err)
	}
}
