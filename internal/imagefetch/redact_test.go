package imagefetch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRedactURL(t *testing.T) {
	cases := map[string]struct {
		reason string
		in     string
		want   string
	}{
		"Plain": {
			reason: "A URL without secrets is shown as it is.",
			in:     "https://cloud.debian.org/images/a.qcow2",
			want:   "https://cloud.debian.org/images/a.qcow2",
		},
		"Password": {
			reason: "A password is hidden.",
			in:     "https://user:hunter2@mirror.example.org/a.qcow2",
			want:   "https://user:xxxxx@mirror.example.org/a.qcow2",
		},
		"PresignedQuery": {
			reason: "A query (a pre-signed URL's token) is replaced by a short digest of it.",
			in:     "https://bucket.s3.example.com/a.qcow2?X-Amz-Signature=SECRETTOKEN&X-Amz-Expires=600",
			want:   "https://bucket.s3.example.com/a.qcow2?redacted-3946a469b09e",
		},
		"Fragment": {
			reason: "A fragment goes too.",
			in:     "https://mirror.example.org/a.qcow2#SECRET",
			want:   "https://mirror.example.org/a.qcow2",
		},
		"Unparsable": {
			reason: "A string that is not a URL loses everything after its '?'.",
			in:     "https://mirror.example.org/%zz?token=SECRET",
			want:   "https://mirror.example.org/%zz?redacted",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := RedactURL(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nRedactURL(...): -want, +got:\n%s", tc.reason, diff)
			}
			if strings.Contains(got, "SECRET") || strings.Contains(got, "hunter2") {
				t.Errorf("RedactURL(%q) = %q still shows the secret", tc.in, got)
			}
		})
	}
	if RedactURL("https://x.example.org/a?t=1") == RedactURL("https://x.example.org/a?t=2") {
		t.Error("URLs that differ only in their query must stay different once redacted")
	}
}

// TestTokenNeverInErrors: the errors of a download from a pre-signed URL (an HTTP status, a
// refused redirect, a connection refused) never show its query.
func TestTokenNeverInErrors(t *testing.T) {
	const token = "X-Amz-Signature=SECRETTOKEN"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://169.254.169.254/latest?"+token, http.StatusFound)
		default:
			http.Error(w, "forbidden", http.StatusForbidden)
		}
	}))
	defer srv.Close()
	f := New(downloadsFor(t, allowServers(t, srv)))
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	for _, u := range []string{srv.URL + "/a.qcow2?" + token, srv.URL + "/redirect?" + token, closedURL + "/a.qcow2?" + token} {
		_, _, err := f.Digest(context.Background(), u, FormatQCOW2)
		if err == nil {
			t.Fatalf("Digest(%s): want an error", u)
		}
		if strings.Contains(err.Error(), "SECRETTOKEN") {
			t.Errorf("Digest(%s) error shows the token: %v", u, err)
		}
	}
}
