package main

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// whyWidth is the WHY column's width: the rest of the table must still fit
// a terminal of about 150 columns.
const whyWidth = 70

// why explains a task that does not run: the first False condition, with
// the scheduler's message shortened so the column starts with what is
// missing.
func why(task *gputaskv1.GPUTask) string {
	for _, t := range []string{gputaskv1.ConditionSpecValid, gputaskv1.ConditionPodOwned, gputaskv1.ConditionScheduled} {
		c := meta.FindStatusCondition(task.Status.Conditions, t)
		if c == nil || c.Status != metav1.ConditionFalse {
			continue
		}
		msg := c.Message
		if t == gputaskv1.ConditionScheduled {
			msg = shortSchedulerMessage(msg)
		}
		if msg == "" {
			return c.Reason
		}
		return truncate(c.Reason+": "+msg, whyWidth)
	}
	return ""
}

// shortSchedulerMessage rewrites the scheduler's FitError, such as
//
//	0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector,
//	2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: ...
//
// as "2 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node
// affinity/selector (0/3 nodes)". The scheduler sorts its counted reasons
// as strings, so a shortage can sit behind reasons that only say a node is
// of another GPU model, and a narrow column cut it off. Shortages
// ("Insufficient ...", "Too many pods") come first, then the other reasons,
// larger counts first. The preemption part is left out: it repeats the
// nodes and `kubectl describe` shows it. A message in another form is
// returned as it is.
func shortSchedulerMessage(msg string) string {
	head, rest, ok := strings.Cut(msg, " nodes are available: ")
	if !ok || !strings.HasPrefix(head, "0/") {
		return msg
	}
	// Each part of the message ends with ". "; the first is the filter's.
	filter, _, _ := strings.Cut(rest, ". ")
	filter = strings.TrimSuffix(filter, ".")
	reasons := countedReasons(filter)
	if len(reasons) == 0 {
		return filter + " (" + head + " nodes)"
	}
	slices.SortStableFunc(reasons, func(a, b countedReason) int {
		if a.shortage() != b.shortage() {
			if a.shortage() {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.count, a.count)
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = r.text
	}
	return strings.Join(parts, ", ") + " (" + head + " nodes)"
}

// countedReason is one "<count> <reason>" of the scheduler's message.
type countedReason struct {
	count int
	text  string // with the count, as the scheduler wrote it
}

func (r countedReason) shortage() bool {
	reason := r.text[strings.IndexByte(r.text, ' ')+1:]
	return strings.HasPrefix(reason, "Insufficient ") || reason == "Too many pods"
}

// countedReasons splits "1 a, 2 b" into its reasons. A piece that does not
// start with a count belongs to the reason before it (a reason may hold a
// comma); without any count, such as a PreFilter plugin's message, it
// returns nil.
func countedReasons(s string) []countedReason {
	var reasons []countedReason
	for _, piece := range strings.Split(s, ", ") {
		n, ok := leadingCount(piece)
		switch {
		case ok:
			reasons = append(reasons, countedReason{count: n, text: piece})
		case len(reasons) > 0:
			reasons[len(reasons)-1].text += ", " + piece
		default:
			return nil
		}
	}
	return reasons
}

// leadingCount parses the "2" of "2 Insufficient nvidia.com/gpu".
func leadingCount(s string) (int, bool) {
	num, _, ok := strings.Cut(s, " ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil && n >= 0
}
