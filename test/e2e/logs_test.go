package e2e

// Scans of a controller process's log.

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/test/framework"
)

// identityRE finds the leader election identity a controller logs.
var identityRE = regexp.MustCompile(`"Waiting for leadership".*identity="([^"]+)"`)

// controllerIdentity waits for the controller to log its leader election
// identity and returns it.
func controllerIdentity(t *testing.T, p *framework.Process) string {
	t.Helper()
	var id string
	framework.Poll(t, 30*time.Second, "leader election identity in "+p.LogPath, func(context.Context) (bool, string) {
		if m := identityRE.FindStringSubmatch(readLog(p)); m != nil {
			id = m[1]
			return true, ""
		}
		return false, p.LogTail(5)
	})
	return id
}

// readLog returns the whole log of a process.
func readLog(p *framework.Process) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// logContains reports whether the process's log has a line containing every
// one of parts.
func logContains(p *framework.Process, parts ...string) bool {
	for _, line := range strings.Split(readLog(p), "\n") {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			return true
		}
	}
	return false
}

// forbiddenLines returns the log lines of p that report a refused request.
func forbiddenLines(p *framework.Process) []string {
	var bad []string
	for _, line := range strings.Split(readLog(p), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			bad = append(bad, line)
		}
	}
	return bad
}

// lineWith returns the first line of s that contains part.
func lineWith(s, part string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, part) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
