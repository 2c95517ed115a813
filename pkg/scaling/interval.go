package scaling

import "time"

// NextStep applies the one-step-per-interval rule: a set's count changes at
// most once per interval, whatever else happens in between (spec edits,
// annotation changes, retries after an error, informer events, a new
// leader). It reports whether a step may be taken at now, and if not, how
// long until it may. A zero lastStep (never scaled) or an interval <= 0
// never waits.
func NextStep(lastStep time.Time, interval time.Duration, now time.Time) (bool, time.Duration) {
	if lastStep.IsZero() || interval <= 0 {
		return true, 0
	}
	if wait := lastStep.Add(interval).Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}
