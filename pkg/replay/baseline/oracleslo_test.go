package baseline

import (
	"slices"
	"testing"
	"time"
)

// smallestMeeting finds the smallest count that meets from any guess, and
// the limit when none does.
func TestSmallestMeeting(t *testing.T) {
	for _, tc := range []struct{ need, guess, limit, want int32 }{
		{need: 5, guess: 0, limit: 40, want: 5},
		{need: 5, guess: 5, limit: 40, want: 5},
		{need: 5, guess: 17, limit: 40, want: 5},
		{need: 0, guess: 9, limit: 40, want: 0},
		{need: 39, guess: 2, limit: 40, want: 39},
		{need: 50, guess: 2, limit: 40, want: 40},
	} {
		tried := 0
		got := smallestMeeting(tc.guess, tc.limit, func(n int32) bool { tried++; return n >= tc.need })
		if got != tc.want || tried > 16 {
			t.Errorf("need %d from %d: %d after %d trials, want %d", tc.need, tc.guess, got, tried, tc.want)
		}
	}
}

// A count that dips and comes back within a start-up keeps its workers;
// one that stays down longer lets them go.
func TestKeepThroughDips(t *testing.T) {
	got := keepThroughDips([]int32{4, 2, 4, 4, 1, 1, 1, 1, 3}, 2*time.Minute)
	want := []int32{4, 4, 4, 4, 1, 1, 1, 1, 3}
	// At 4 the count falls to 1 and comes back to 3 only after four
	// intervals, beyond the 2-minute start-up.
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	got = keepThroughDips([]int32{4, 1, 1, 3}, 2*time.Minute)
	if want := []int32{4, 3, 3, 3}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v: the 3 needed again within 2 minutes stay", got, want)
	}
}
