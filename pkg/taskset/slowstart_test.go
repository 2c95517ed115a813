package taskset

import (
	"errors"
	"sync/atomic"
	"testing"
)

func TestSlowStartBatch(t *testing.T) {
	boom := errors.New("quota exceeded")
	tests := []struct {
		name          string
		count         int
		failAfter     int64 // calls beyond this number fail; -1 never
		wantSuccesses int
		wantCalls     int64
		wantErr       bool
	}{
		{name: "zero", count: 0, failAfter: -1, wantSuccesses: 0, wantCalls: 0},
		{name: "all succeed", count: 10, failAfter: -1, wantSuccesses: 10, wantCalls: 10},
		{name: "first call fails", count: 10, failAfter: 0, wantSuccesses: 0, wantCalls: 1, wantErr: true},
		// Batches 1, 2, 4: the third batch fails, the fourth is never tried.
		{name: "stops at the first failing batch", count: 10, failAfter: 3, wantSuccesses: 3, wantCalls: 7, wantErr: true},
		{name: "partly failing batch counts its successes", count: 10, failAfter: 5, wantSuccesses: 5, wantCalls: 7, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			got, err := slowStartBatch(tc.count, 1, func() error {
				if n := calls.Add(1); tc.failAfter >= 0 && n > tc.failAfter {
					return boom
				}
				return nil
			})
			if got != tc.wantSuccesses || calls.Load() != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Errorf("slowStartBatch() = %d, %v after %d calls; want %d, err=%v after %d calls",
					got, err, calls.Load(), tc.wantSuccesses, tc.wantErr, tc.wantCalls)
			}
		})
	}
}
