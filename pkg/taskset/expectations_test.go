package taskset

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	clk := testingclock.NewFakeClock(testNow)
	e := newExpectations(clk, time.Minute)
	const key = "default/set"

	if !e.Satisfied(key) {
		t.Fatal("a set with no record must be satisfied")
	}

	e.ExpectCreations(key, 2)
	e.ExpectDeletions(key, "a", "b")
	e.ExpectAnnotation(key, "c", "T1")
	if e.Satisfied(key) {
		t.Fatal("pending writes must not be satisfied")
	}

	e.CreationObserved(key)
	e.CreationObserved(key)
	e.CreationObserved(key) // a stray extra observation must not go below zero
	e.DeletionObserved(key, "a")
	e.DeletionObserved(key, "a") // seen twice: deletion timestamp, then delete
	e.AnnotationObserved(key, "c", "T0")
	if e.Satisfied(key) {
		t.Fatal("deletion of b and annotation T1 on c are still pending")
	}
	e.DeletionObserved(key, "b")
	e.AnnotationObserved(key, "c", "T1")
	if !e.Satisfied(key) {
		t.Fatal("every write was observed; want satisfied")
	}

	// A deleted task settles its annotation expectation too.
	e.ExpectAnnotation(key, "d", "T2")
	e.DeletionObserved(key, "d")
	if !e.Satisfied(key) {
		t.Fatal("deleting an annotated task must settle its expectation")
	}

	// A failed patch is forgotten.
	e.ExpectAnnotation(key, "e", "T3")
	e.ForgetAnnotation(key, "e")
	if !e.Satisfied(key) {
		t.Fatal("a forgotten annotation must not block")
	}

	// Expiry: a lost event blocks the set only for the timeout.
	e.ExpectCreations(key, 1)
	clk.Step(time.Minute)
	if e.Satisfied(key) {
		t.Fatal("not expired yet at exactly the timeout")
	}
	clk.Step(time.Second)
	if !e.Satisfied(key) {
		t.Fatal("expired expectations must be satisfied")
	}
	// The expired record was dropped, so new writes count from zero.
	e.ExpectCreations(key, 1)
	e.CreationObserved(key)
	if !e.Satisfied(key) {
		t.Fatal("the expired creation must not linger in the new record")
	}

	e.ExpectCreations(key, 3)
	e.Delete(key)
	if !e.Satisfied(key) {
		t.Fatal("Delete must drop the record")
	}
}

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
