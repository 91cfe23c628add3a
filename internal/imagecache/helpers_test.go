package imagecache

import (
	"encoding/json"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

func wrapErr(err error) error { return errors.Wrap(errors.Wrap(err, "inner"), "outer") }

// jsonRaw encodes r as is (Encode would fix schema and kind).
func jsonRaw(r Record) ([]byte, error) { return json.Marshal(r) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
