package imagefetch

import "net/url"

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

// RedactURL hides a password in a URL.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}
