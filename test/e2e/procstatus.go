//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procStatus is what /proc/PID/status says of a process's privileges.
type procStatus struct {
	PID        int
	UIDs       string // real, effective, saved, filesystem
	NoNewPrivs bool
	CapEff     string
}

// containerProcess finds, under procRoot (/proc), the first process whose cgroup names the
// container ID and reads its status: the view the kernel has of the provider's process,
// whatever its pod spec says (cluster/node/packages.sh reads the same).
func containerProcess(procRoot, containerID string) (procStatus, error) {
	if containerID == "" {
		return procStatus{}, fmt.Errorf("no container ID")
	}
	dirs, err := os.ReadDir(procRoot)
	if err != nil {
		return procStatus{}, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(procRoot, d.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), containerID) {
			continue
		}
		st, err := readProcStatus(filepath.Join(procRoot, d.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		st.PID = pid
		return st, nil
	}
	return procStatus{}, fmt.Errorf("no process of container %s under %s", containerID, procRoot)
}

// readProcStatus reads the Uid, NoNewPrivs and CapEff lines of a /proc/PID/status file.
func readProcStatus(path string) (procStatus, error) {
	f, err := os.Open(path)
	if err != nil {
		return procStatus{}, err
	}
	defer func() { _ = f.Close() }()
	var st procStatus
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Uid":
			st.UIDs, seen = v, seen+1
		case "NoNewPrivs":
			st.NoNewPrivs, seen = v == "1", seen+1
		case "CapEff":
			st.CapEff, seen = v, seen+1
		}
	}
	if err := sc.Err(); err != nil {
		return procStatus{}, err
	}
	if seen != 3 {
		return procStatus{}, fmt.Errorf("%s lacks Uid, NoNewPrivs or CapEff", path)
	}
	return st, nil
}

// unprivileged says what is wrong with st for a process that must run as uid, with
// no_new_privs and no effective capability ("" when nothing is).
func (st procStatus) unprivileged(uid int) string {
	var bad []string
	if want := strings.Repeat(strconv.Itoa(uid)+" ", 4); st.UIDs+" " != want {
		bad = append(bad, "Uid "+st.UIDs)
	}
	if !st.NoNewPrivs {
		bad = append(bad, "NoNewPrivs 0")
	}
	if strings.Trim(st.CapEff, "0") != "" {
		bad = append(bad, "CapEff "+st.CapEff)
	}
	return strings.Join(bad, ", ")
}
