package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat. It is
// 100 on every Linux architecture Kubernetes runs on.
const clockTicks = 100

// Usage is what a process has consumed so far.
type Usage struct {
	// CPU is user plus system time.
	CPU time.Duration
	// PeakRSS is the high-water mark of the resident set (VmHWM), in bytes.
	PeakRSS int64
}

// Usage reads the process's CPU time and peak resident set from /proc.
func (p *Process) Usage() (Usage, error) {
	pid := p.Pid()
	cpu, err := procCPU(pid)
	if err != nil {
		return Usage{}, fmt.Errorf("reading the CPU time of %s: %w", p.Name, err)
	}
	rss, err := procPeakRSS(pid)
	if err != nil {
		return Usage{}, fmt.Errorf("reading the peak RSS of %s: %w", p.Name, err)
	}
	return Usage{CPU: cpu, PeakRSS: rss}, nil
}

// procCPU returns utime+stime of /proc/<pid>/stat. The command name, field 2,
// may hold spaces, so the fields are counted from its closing parenthesis.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	// After ") " come state (field 3) ... utime (14) and stime (15).
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procPeakRSS returns VmHWM of /proc/<pid>/status in bytes.
func procPeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		value, ok := strings.CutPrefix(scanner.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing VmHWM of /proc/%d/status: %w", pid, err)
		}
		return kb * 1024, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
