package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// StartupModel is how long a new worker takes from its creation until it
// is Ready: fixed, or drawn per worker from a log-normal distribution
// (image pull, model download and load vary from one pod to the next),
// never below Floor.
type StartupModel struct {
	// Median is the fixed start-up, or the log-normal's median.
	Median time.Duration
	// Sigma is the log-normal's sigma; 0 is a fixed start-up.
	Sigma float64
	// Floor is the shortest start-up drawn: no worker loads its model
	// faster than the fastest pull and load allow.
	Floor time.Duration
}

// FixedStartup is a start-up of d for every worker.
func FixedStartup(d time.Duration) StartupModel { return StartupModel{Median: max(d, 0)} }

// ParseStartup reads --startup: a duration such as "2m", or
// "lognormal:MEDIAN,SIGMA[,FLOOR]", where the floor defaults to half the
// median.
func ParseStartup(s string) (StartupModel, error) {
	rest, ok := strings.CutPrefix(s, "lognormal:")
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return StartupModel{}, fmt.Errorf("startup %q: want a duration such as 2m, or lognormal:MEDIAN,SIGMA[,FLOOR]", s)
		}
		return FixedStartup(d), nil
	}
	parts := strings.Split(rest, ",")
	if len(parts) < 2 || len(parts) > 3 {
		return StartupModel{}, fmt.Errorf("startup %q: want lognormal:MEDIAN,SIGMA[,FLOOR]", s)
	}
	median, err := time.ParseDuration(strings.TrimSpace(parts[0]))
	if err != nil || median <= 0 {
		return StartupModel{}, fmt.Errorf("startup %q: the median must be a positive duration", s)
	}
	sigma, err := strconv.ParseFloat(strings.TrimSpace(parts[1]), 64)
	if err != nil || sigma < 0 || math.IsInf(sigma, 0) || math.IsNaN(sigma) {
		return StartupModel{}, fmt.Errorf("startup %q: sigma must be a number >= 0", s)
	}
	m := StartupModel{Median: median, Sigma: sigma, Floor: median / 2}
	if len(parts) == 3 {
		floor, err := time.ParseDuration(strings.TrimSpace(parts[2]))
		if err != nil || floor < 0 || floor > median {
			return StartupModel{}, fmt.Errorf("startup %q: the floor must be a duration between 0 and the median", s)
		}
		m.Floor = floor
	}
	return m, nil
}

// String is the model as --startup takes it.
func (m StartupModel) String() string {
	if m.Sigma == 0 {
		return m.Median.String()
	}
	return fmt.Sprintf("lognormal:%v,%g,%v", m.Median, m.Sigma, m.Floor)
}

// draw is one worker's start-up.
func (m StartupModel) draw(rng *rand.Rand) time.Duration {
	if m.Sigma == 0 || rng == nil {
		return m.Median
	}
	d := time.Duration(float64(m.Median) * math.Exp(m.Sigma*rng.NormFloat64()))
	return max(d, m.Floor)
}
