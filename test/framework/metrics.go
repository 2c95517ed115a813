package framework

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MetricValue finds the sample of name whose labels include labels, in the
// Prometheus text format, and returns its value.
func MetricValue(body, name string, labels map[string]string) (float64, bool) {
	var pairs []string
	for k, v := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(pairs)
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		all := true
		for _, p := range pairs {
			all = all && strings.Contains(line, p)
		}
		if !all {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		return v, true
	}
	return 0, false
}
