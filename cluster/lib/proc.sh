# shellcheck shell=bash
# proc.sh -- the one process library of the test beds, sourced (never run) by the scripts of
# cluster/e2e, cluster/node, cluster/lan and cluster/testbed. The caller sets PIDS (the directory
# of pid files) and, for start, LOGS; it may define proc_log after sourcing (default: echo).
#
# A process is known by its pid file $PIDS/NAME.pid, "PID START", START being field 22 of
# /proc/PID/stat (when it started, in clock ticks after boot). A PID counts as ours, and is
# signalled, only while that start time still matches: PIDs get reused. Never a bare kill -0.
#
#   start NAME CMD...     CMD in the background in a session (so a process group) of its own,
#                         holding no descriptor of ours but its log $LOGS/NAME.log (stdout and
#                         stderr, appended; stdin /dev/null): a daemon that inherited a caller's
#                         flock or a test's pipe would hold it for as long as it runs. NAME is
#                         added to $PIDS/order (stop_all).
#   daemon NAME CMD...    CMD daemonizes itself and writes its PID into $PIDS/NAME.pid (libvirtd
#                         --pid-file, sshd's PidFile, dnsmasq --pid-file), run holding no
#                         descriptor of ours (all on /dev/null); once the file names a process
#                         (10 s at most) its start time goes to $PIDS/NAME.start (the pid file
#                         is the daemon's, and others read it as a bare PID); status 0 if it runs
#   alive NAME            the recorded process runs: there, not a zombie, the same start time
#   pid_of NAME           its PID
#   stop_one NAME [SECS]  SIGTERM to the process group it leads (to it alone if it leads none),
#                         SIGKILL after SECS (15) s; its pid file goes
#   stop_all              every process start recorded, newest first
#   waitport PORT [HOST]  something accepts TCP connections on HOST (127.0.0.1):PORT, within 60 s
# NAME may be a path instead (it contains a /): a pid file written by someone else, such as a
# qemu's of libvirt's. A pid file without a start time (also one of a daemon started before
# this library recorded them) counts only while its process started before the file was last
# written: a reused PID's process starts after that.

declare -F proc_log >/dev/null || proc_log() { printf '%s\n' "$*"; }

_proc_file() { if [[ $1 == */* ]]; then echo "$1"; else echo "$PIDS/$1.pid"; fi; }

# _proc_read FILE: PROC_PID and PROC_START (empty if not recorded) from FILE, or FILE's
# PID and the start time in FILE's .start next to it.
_proc_read() {
	local f=$1 rest
	PROC_PID='' PROC_START=''
	[[ -s $f ]] || return 1
	read -r PROC_PID PROC_START rest <"$f" || true
	[[ -n $PROC_START || $f != *.pid || ! -s ${f%.pid}.start ]] || read -r PROC_START <"${f%.pid}.start" || true
	[[ $PROC_PID =~ ^[1-9][0-9]*$ ]]
}

# _proc_stat PID: PROC_STATE and PROC_STARTED (fields 3 and 22 of /proc/PID/stat; the command
# name, field 2, may hold spaces and parentheses).
_proc_stat() {
	local s f
	read -r s 2>/dev/null <"/proc/$1/stat" || return 1
	read -r -a f <<<"${s##*) }"
	PROC_STATE=${f[0]} PROC_STARTED=${f[19]}
	[[ -n $PROC_STARTED ]]
}

# _proc_is PID START: PID runs (not a zombie) and started at START.
_proc_is() { _proc_stat "$1" && [[ $PROC_STATE != [ZX] && $PROC_STARTED == "$2" ]]; }

# _proc_before TICKS FILE: a process that started TICKS clock ticks after boot started before
# FILE was last written (with 1 s of slack).
_proc_before() {
	local hz up
	hz=$(getconf CLK_TCK)
	read -r up _ </proc/uptime
	awk -v t="$1" -v hz="$hz" -v up="$up" -v m="$(date -r "$2" +%s.%N)" -v n="$(date +%s.%N)" \
		'BEGIN { exit !(t / hz <= up - (n - m) + 1) }'
}

alive() {
	local f
	f=$(_proc_file "$1")
	_proc_read "$f" && _proc_stat "$PROC_PID" && [[ $PROC_STATE != [ZX] ]] || return 1
	if [[ -n $PROC_START ]]; then
		[[ $PROC_STARTED == "$PROC_START" ]]
	else
		_proc_before "$PROC_STARTED" "$f"
	fi
}

pid_of() { _proc_read "$(_proc_file "$1")" && echo "$PROC_PID"; }

_proc_closefds() {
	local fd
	for fd in /proc/self/fd/*; do
		fd=${fd##*/}
		[[ $fd -gt 2 ]] && eval "exec $fd>&-" 2>/dev/null
	done
}

start() {
	local name=$1 pid
	shift
	(
		_proc_closefds
		exec setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1
	) &
	pid=$!
	_proc_stat "$pid" || PROC_STARTED=gone
	echo "$pid $PROC_STARTED" >"$PIDS/$name.pid"
	echo "$name" >>"$PIDS/order"
	proc_log "started $name (pid $pid, log $LOGS/$name.log)"
}

daemon() {
	local name=$1 i
	shift
	rm -f "$PIDS/$name.pid" "$PIDS/$name.start"
	(
		_proc_closefds
		exec "$@" </dev/null >/dev/null 2>&1
	) || true
	for ((i = 0; i < 100; i++)); do
		if _proc_read "$PIDS/$name.pid" && _proc_stat "$PROC_PID"; then
			echo "$PROC_STARTED" >"$PIDS/$name.start"
			alive "$name"
			return
		fi
		sleep 0.1
	done
	return 1
}

stop_one() {
	local f name=${1##*/} secs=${2:-15} pid st i
	f=$(_proc_file "$1")
	name=${name%.pid}
	if alive "$1"; then
		pid=$PROC_PID st=$PROC_STARTED
		proc_log "stopping $name (pid $pid)"
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < secs * 10; i++)); do
			_proc_is "$pid" "$st" || break
			sleep 0.1
		done
		if _proc_is "$pid" "$st"; then
			proc_log "$name (pid $pid) ignored SIGTERM for $secs s: SIGKILL"
			kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$f" "${f%.pid}.start"
}

stop_all() {
	local name
	[[ -s $PIDS/order ]] || return 0
	while read -r name; do
		[[ -e $PIDS/$name.pid ]] || continue
		stop_one "$name"
	done < <(tac "$PIDS/order")
	: >"$PIDS/order"
}

waitport() {
	local i
	for ((i = 0; i < 300; i++)); do
		(exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}
