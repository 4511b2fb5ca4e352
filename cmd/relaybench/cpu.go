package main

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTicks = 100

// cpuSample is the machine's busy CPU time, the part of it this process and
// the gateway process used (ours) and this process's alone (self), in clock
// ticks; zero where /proc is missing.
type cpuSample struct {
	at               time.Time
	busy, ours, self uint64
	unavailable      bool
}

// sampleCPU reads /proc/stat and the stat files of this process and of
// childPID.
func sampleCPU(childPID int) cpuSample {
	s := cpuSample{at: time.Now()}
	busy, ok := machineTicks()
	if !ok {
		return cpuSample{unavailable: true}
	}
	s.busy = busy
	for _, pid := range []string{"self", strconv.Itoa(childPID)} {
		t, ok := processTicks(pid)
		if !ok {
			return cpuSample{unavailable: true}
		}
		s.ours += t
		if pid == "self" {
			s.self = t
		}
	}
	return s
}

// machineTicks is the busy CPU time of the whole machine from /proc/stat.
func machineTicks() (uint64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line) // cpu user nice system idle iowait irq softirq steal …
	var busy uint64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait, guest time (already in user)
			continue
		}
		n, _ := strconv.ParseUint(string(v), 10, 64)
		busy += n
	}
	return busy, true
}

// processTicks returns utime+stime of a process from /proc/<pid>/stat.
func processTicks(pid string) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:]) // state is field 3 of the file, f[0] here
	if len(f) < 13 {
		return 0, false
	}
	utime, _ := strconv.ParseUint(string(f[11]), 10, 64)
	stime, _ := strconv.ParseUint(string(f[12]), 10, 64)
	return utime + stime, true
}

// othersCores is how many cores, on average between a and z, processes
// other than relaybench's two kept busy: a run sharing the machine with
// other work measures less than the machine can do. -1 when unknown.
func othersCores(a, z cpuSample) float64 {
	if a.unavailable || z.unavailable || !z.at.After(a.at) || z.busy < a.busy {
		return -1
	}
	others := float64(z.busy-a.busy) - float64(z.ours-a.ours)
	return max(0, others/clockTicks/z.at.Sub(a.at).Seconds())
}

// ownCPU is the CPU time relaybench's two processes used between a and z;
// -1 when unknown.
func ownCPU(a, z cpuSample) time.Duration {
	if a.unavailable || z.unavailable || z.ours < a.ours {
		return -1
	}
	return time.Duration(z.ours-a.ours) * time.Second / clockTicks
}

// selfCPU is the part of ownCPU this process used (the relay or the echo
// server, and the event source); -1 when unknown.
func selfCPU(a, z cpuSample) time.Duration {
	if ownCPU(a, z) < 0 || z.self < a.self {
		return -1
	}
	return time.Duration(z.self-a.self) * time.Second / clockTicks
}
