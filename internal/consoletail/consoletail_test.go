package consoletail

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestTail(t *testing.T) {
	cases := map[string]struct {
		reason  string
		log     string
		max     int
		secrets []string
		want    string
	}{
		"Empty": {
			reason: "An empty log has no tail.",
			log:    "",
			max:    MaxBytes,
			want:   "",
		},
		"DropsTheCutFirstLine": {
			reason: "The first line of what was read is likely cut, so it is dropped.",
			log:    "t of a line\nsquid[123]: Starting\nlogin: ",
			max:    MaxBytes,
			want:   "squid[123]: Starting\nlogin:",
		},
		"KeepsTheNewestWholeLinesThatFit": {
			reason: "Only whole lines, the newest, within max bytes.",
			log:    "x\n0123456789\nabcdefghij\nKLMNOPQRST\n",
			max:    22,
			want:   "abcdefghij\nKLMNOPQRST",
		},
		"LongLastLineKeepsItsEnd": {
			reason: "A last line longer than max alone keeps its end, marked.",
			log:    "x\n" + strings.Repeat("a", 50) + "END",
			max:    10,
			want:   "...aaaaEND",
		},
		"EscapesAndControlsRemoved": {
			reason: "ANSI colours, carriage returns and binary noise do not reach the event.",
			log:    "x\n\x1b[0;32m  OK  \x1b[0m] Started squid\r\n\x00\x07boot\xff\xfeok\n",
			max:    MaxBytes,
			want:   "  OK  ] Started squid\nbootok",
		},
		"SecretValueWithheld": {
			reason:  "A line containing a value of the seed's Secret is withheld whole.",
			log:     "x\nbefore\nfoo: cannot parse acl s3cr3t-acl-value here\nafter\n",
			max:     MaxBytes,
			secrets: []string{"s3cr3t-acl-value"},
			want:    "before\n" + withheld + "\nafter",
		},
		"EachLineOfAMultiLineSecret": {
			reason:  "Each line of a multi-line secret (user-data) is looked for on its own.",
			log:     "x\nFailed loading yaml blob: http_access allow team-a-only-net\nok\n",
			max:     MaxBytes,
			secrets: []string{"#cloud-config\nwrite_files:\n- content: |\n    http_access allow team-a-only-net\n"},
			want:    withheld + "\nok",
		},
		"ShortSecretsIgnored": {
			reason:  "Values too short to be told from ordinary text do not withhold every line.",
			log:     "x\nyes it booted\n",
			max:     MaxBytes,
			secrets: []string{"yes"},
			want:    "yes it booted",
		},
		"CloudInitRandomPasswords": {
			reason: "cloud-init's generated passwords: the header and every user:password pair after it are withheld, in one notice.",
			log: "x\nci-info: no authorized SSH keys fingerprints found for user debian.\n" +
				"Set the following 'random' passwords\ndebian:Xk3v9Qm2Lp\nroot:Zz81hhqW\n\n" +
				"Cloud-init v. 24.1 finished\n",
			max:  MaxBytes,
			want: "ci-info: no authorized SSH keys fingerprints found for user debian.\n" + withheld + "\nCloud-init v. 24.1 finished",
		},
		"SecretWords": {
			reason: "Lines naming tokens, keys or authorization are withheld.",
			log: "x\nkernel: command line: console=ttyS0 token=abcdef\nok\n-----BEGIN OPENSSH PRIVATE KEY-----\n" +
				"b3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\nAuthorization: Bearer zzz\nlogin: ",
			max: MaxBytes,
			// The key's body lines are withheld with their block.
			want: withheld + "\nok\n" + withheld + "\nlogin:",
		},
		"WithheldLastLineLongerThanMax": {
			reason: "A withheld line never shows, whatever max is.",
			log:    "x\npassword=" + strings.Repeat("p", 100),
			max:    12,
			want:   withheld[:12],
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var secrets [][]byte
			for _, s := range tc.secrets {
				secrets = append(secrets, []byte(s))
			}
			got := Tail([]byte(tc.log), tc.max, secrets...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nTail(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestTailBounds checks the bound on every size of a log with long lines, multi-byte runes
// and secrets: never more than max bytes, always valid UTF-8, never a secret.
func TestTailBounds(t *testing.T) {
	secret := "hunter2-hunter2"
	var b strings.Builder
	for i := range 200 {
		b.WriteString(strings.Repeat("é", i%40))
		if i%17 == 0 {
			b.WriteString(" " + secret)
		}
		b.WriteString("\n")
	}
	log := b.String()
	for _, max := range []int{1, 2, 3, 4, 10, 64, 100, MaxBytes, 4096} {
		for cut := 0; cut < len(log); cut += 97 {
			got := Tail([]byte(log[cut:]), max, []byte(secret))
			if len(got) > max {
				t.Fatalf("Tail(log[%d:], %d) is %d bytes, more than max", cut, max, len(got))
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Tail(log[%d:], %d) is not valid UTF-8: %q", cut, max, got)
			}
			if strings.Contains(got, "hunter") {
				t.Fatalf("Tail(log[%d:], %d) shows (part of) the secret: %q", cut, max, got)
			}
		}
	}
}
