// Package consoletail makes the end of a guest's serial console log fit to show to the team
// that owns the guest, in an event: bounded in bytes, printable, and without what may be a
// secret.
//
// A console prints more than boot messages. cloud-init prints the passwords it generates
// (chpasswd's "random" passwords, one "user:password" line each), and on a user-data it cannot
// parse it prints part of that user-data; kernels and services print tokens in command lines
// and URLs. So a line is withheld, whole, when it contains one of the values the caller says
// are secret (the seed's Secrets, and each of their lines), when it names a secret-like word
// (password, token, private key, ...), and when it follows a password header and looks like a
// "user:password" pair, and every line of a "-----BEGIN ...-----" block. What is withheld is replaced by a line saying so, never shortened,
// since a shortened secret is still part of one.
package consoletail

import (
	"bytes"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// ReadBytes is how much of the end of a console log is read: enough for the lines
	// MaxBytes keeps after withheld lines and escape sequences are dropped.
	ReadBytes = 16 << 10
	// MaxBytes bounds the tail returned (an event's message stays well under the 1 KiB
	// kubectl shows comfortably, with room for a header).
	MaxBytes = 768
	// minSecretLen is the shortest secret value matched: shorter values ("1", "yes") would
	// withhold every line.
	minSecretLen = 6

	withheld = "[line withheld: it may carry a secret]"
)

var (
	// escapes are ANSI/VT100 escape sequences (CSI, OSC, and two-byte ones).
	escapes = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]`)
	// secretWords withhold a line on their own.
	secretWords = regexp.MustCompile(`(?i)pass(word|wd|phrase)?\b|passw|secret|token|private[ _-]?key|BEGIN [A-Z ]*KEY|api[_-]?key|authorization|bearer|credential|chpasswd|user-?data|\bsalt\b`)
	// keyBlocks start and end PEM-style blocks: every line between is withheld.
	keyBegin = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]+-----`)
	keyEnd   = regexp.MustCompile(`-----END [A-Z0-9 ]+-----`)
	// pairs are "user:password" lines, as cloud-init prints generated passwords.
	pairs = regexp.MustCompile(`^\s*[a-z_][a-z0-9_.-]*:\S+\s*$`)
)

// Tail returns at most max bytes of the end of log, whole lines only, newest last, with
// escape sequences and control characters removed and every line that may carry a secret
// withheld. secrets are values that must never appear (each at least 6 bytes is matched, and
// so is each line of a multi-line value). log may start mid-line (the caller read its end):
// that first partial line is dropped unless it is all there is.
func Tail(log []byte, max int, secrets ...[]byte) string {
	if max <= 0 || len(log) == 0 {
		return ""
	}
	lines := strings.Split(clean(log), "\n")
	if len(lines) > 1 {
		lines = lines[1:] // the first is likely cut; a line before it is not worth the risk
	}
	known := secretValues(secrets)
	out := make([]string, 0, len(lines))
	afterHeader, inBlock := false, false
	for _, l := range lines {
		l = strings.TrimRightFunc(l, unicode.IsSpace)
		switch {
		case inBlock || keyBegin.MatchString(l):
			inBlock = !keyEnd.MatchString(l)
			l = withheld
		case l == "":
			afterHeader = false
			continue
		case containsAny(l, known) || secretWords.MatchString(l):
			afterHeader = true // a password header: the pairs that follow are withheld too
			l = withheld
		case afterHeader && pairs.MatchString(l):
			l = withheld
		default:
			afterHeader = false
		}
		if l == withheld && len(out) > 0 && out[len(out)-1] == withheld {
			continue // one notice for a run of withheld lines
		}
		out = append(out, l)
	}
	return keepLast(out, max)
}

// clean makes log printable text: valid UTF-8, escapes and control characters removed,
// carriage returns as line ends.
func clean(log []byte) string {
	log = escapes.ReplaceAll(log, nil)
	log = bytes.ReplaceAll(log, []byte("\r\n"), []byte("\n"))
	var b strings.Builder
	for len(log) > 0 {
		r, n := utf8.DecodeRune(log)
		log = log[n:]
		switch {
		case r == '\r':
			b.WriteByte('\n')
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == utf8.RuneError && n == 1, unicode.IsControl(r):
			// dropped: binary noise
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// secretValues are the values to look for: each value and each of its lines, trimmed, of at
// least minSecretLen bytes.
func secretValues(secrets [][]byte) []string {
	var out []string
	for _, s := range secrets {
		for _, v := range append([]string{string(s)}, strings.Split(string(s), "\n")...) {
			if v = strings.TrimSpace(v); len(v) >= minSecretLen {
				out = append(out, v)
			}
		}
	}
	return out
}

func containsAny(l string, values []string) bool {
	for _, v := range values {
		if strings.Contains(l, v) {
			return true
		}
	}
	return false
}

// keepLast keeps the last lines that fit in max bytes with their newlines. A last line longer
// than max alone keeps its end, marked with a leading "...".
func keepLast(lines []string, max int) string {
	size, first := 0, len(lines)
	for i := len(lines) - 1; i >= 0; i-- {
		if size+len(lines[i])+1 > max {
			break
		}
		size += len(lines[i]) + 1
		first = i
	}
	if first == len(lines) && len(lines) > 0 {
		l := lines[len(lines)-1]
		if l == withheld || max <= 3 {
			return truncate(withheld, max)
		}
		cut := len(l) - (max - 3)
		for cut < len(l) && !utf8.RuneStart(l[cut]) {
			cut++
		}
		return "..." + l[cut:]
	}
	return strings.Join(lines[first:], "\n")
}

func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max]
}
