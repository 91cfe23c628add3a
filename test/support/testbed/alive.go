package testbed

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// processAlive is cluster/lib/proc.sh's alive for a daemon's pid file: the process the file
// names runs (there, not a zombie) and is the one that was started, its start time (field 22
// of /proc/PID/stat) being the one recorded next to the pid file (NAME.start). PIDs get
// reused: a bare kill(pid, 0) would take any process that got the PID for the daemon. A pid
// file without a recorded start time counts only while its process started before the file
// was written: a reused PID's process starts after that.
func processAlive(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	state, start, ok := procStat(pid)
	if !ok || state == "Z" || state == "X" {
		return false
	}
	want, err := os.ReadFile(strings.TrimSuffix(pidFile, ".pid") + ".start")
	if err == nil {
		return strings.TrimSpace(string(want)) == start
	}
	return startedBeforeFile(pid, pidFile)
}

// procStat is the state (field 3) and start time (field 22) of /proc/PID/stat.
func procStat(pid int) (state, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", false
	}
	// The command (field 2) is in parentheses and may hold spaces and parentheses: the fields
	// after it start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 20 { // fields 3..22
		return "", "", false
	}
	return f[0], f[19], true
}

// startedBeforeFile: the process started no later than pidFile was last written (its start
// time in clock ticks after boot, at the USER_HZ of 100 Linux reports it in, plus the boot time
// of /proc/stat).
func startedBeforeFile(pid int, pidFile string) bool {
	_, ticks, ok := procStat(pid)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(ticks, 10, 64)
	if err != nil {
		return false
	}
	boot, ok := bootTime()
	if !ok {
		return false
	}
	file, err := os.Stat(pidFile)
	if err != nil {
		return false
	}
	started := boot.Add(time.Duration(n) * time.Second / 100)
	// The pid file's time has a finer grain than a clock tick: a tick of slack.
	return !started.After(file.ModTime().Add(10 * time.Millisecond))
}

// bootTime is the btime line of /proc/stat.
func bootTime() (time.Time, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(s, 0), err == nil
		}
	}
	return time.Time{}, false
}
