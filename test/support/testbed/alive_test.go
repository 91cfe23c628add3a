package testbed

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestProcessAlive(t *testing.T) {
	_, self, ok := procStat(os.Getpid())
	if !ok {
		t.Fatal("cannot read this process's /proc/PID/stat")
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pid := strconv.Itoa(os.Getpid())
	cases := map[string]struct {
		pid, start string // start "" writes no .start file
		want       bool
	}{
		"this process, its start time recorded":         {pid: pid, start: self, want: true},
		"this PID, another start time (the PID reused)": {pid: pid, start: "1", want: false},
		"this process, no start time, file written now": {pid: pid, want: true},
		"no such process": {pid: "999999999", start: self, want: false},
		"not a PID":       {pid: "libvirtd", want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sub := filepath.Join(dir, filepath.Base(t.Name()))
			if err := os.MkdirAll(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(sub, "d.pid")
			if err := os.WriteFile(pidFile, []byte(tc.pid+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.start != "" {
				if err := os.WriteFile(filepath.Join(sub, "d.start"), []byte(tc.start+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := processAlive(pidFile); got != tc.want {
				t.Errorf("processAlive = %v, want %v", got, tc.want)
			}
		})
	}
	// No start time, and the pid file older than the process: a reused PID.
	old := write("old.pid", pid)
	past := time.Now().Add(-24 * 365 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if processAlive(old) {
		t.Error("processAlive of a pid file written before its process started = true")
	}
	if processAlive(filepath.Join(dir, "absent.pid")) {
		t.Error("processAlive of a missing pid file = true")
	}
}
