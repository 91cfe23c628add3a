package imagefetch

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
)

// Format is the on-disk format of an image.
type Format string

// Formats.
const (
	FormatQCOW2 Format = "qcow2"
	FormatRaw   Format = "raw"
)

// OrDefault is f, or qcow2 when f is empty.
func (f Format) OrDefault() Format {
	if f == "" {
		return FormatQCOW2
	}
	return f
}

// RedactURL is a URL as messages, logs, status and records show it: without its password and
// without its query, where pre-signed URLs carry their tokens (see Redacted). A string that is
// not a URL loses everything after its first '?' or '#'.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.IndexAny(s, "?#"); i >= 0 {
			return s[:i] + "?" + queryMark
		}
		return s
	}
	return Redacted(u)
}

// queryMark replaces a query in a redacted URL.
const queryMark = "redacted"

// Redacted is u without its password, its query replaced by "redacted-" and 12 hex digits of
// the query's sha256 (so that two URLs differing only in their token still differ, without
// showing it), and without its fragment.
func Redacted(u *url.URL) string {
	c := *u
	if c.RawQuery != "" || c.ForceQuery {
		sum := sha256.Sum256([]byte(c.RawQuery))
		c.RawQuery, c.ForceQuery = queryMark+"-"+hex.EncodeToString(sum[:6]), false
	}
	c.Fragment, c.RawFragment = "", ""
	return c.Redacted()
}
