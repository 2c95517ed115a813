package queueing

import (
	"math"
	"testing"
)

func near(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-300)
}

// TestErlangTextbook checks published values of Erlang B and C.
func TestErlangTextbook(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  float64
		want float64
		rel  float64
	}{
		{"B(1,1)", ErlangB(1, 1), 0.5, 1e-15},
		{"B(2,1)", ErlangB(2, 1), 0.2, 1e-15},
		{"B(3,2)", ErlangB(3, 2), 4.0 / 19, 1e-15},
		// Erlang B tables: 10 trunks offered 5 erlangs block 1.84 %.
		{"B(10,5)", ErlangB(10, 5), 0.018385, 1e-4},
		{"C(1,0.5) = ρ for M/M/1", ErlangC(1, 0.5), 0.5, 1e-15},
		{"C(2,1)", ErlangC(2, 1), 1.0 / 3, 1e-15},
		{"C(3,2)", ErlangC(3, 2), 4.0 / 9, 1e-15},
		// Call-centre tables: 10 agents offered 8 erlangs, 40.9 % wait.
		{"C(10,8)", ErlangC(10, 8), 0.409, 1e-3},
		{"C(4,2)", ErlangC(4, 2), 4.0 / 23, 1e-15},
		{"no load", ErlangC(5, 0), 0, 0},
		{"overloaded", ErlangC(5, 5), 1, 0},
		{"no servers", ErlangB(0, 3), 1, 0},
	} {
		if !near(tc.got, tc.want, tc.rel) {
			t.Errorf("%s = %.9g, want %.9g", tc.name, tc.got, tc.want)
		}
	}
}

// erlangCByFactorials is the textbook formula, exact in float64 for small c.
func erlangCByFactorials(c int, a float64) float64 {
	term, sum := 1.0, 0.0
	for k := 0; k < c; k++ {
		sum += term
		term *= a / float64(k+1)
	}
	last := term * float64(c) / (float64(c) - a)
	return last / (sum + last)
}

func TestErlangCMatchesFactorialFormula(t *testing.T) {
	for c := 1; c <= 60; c++ {
		for _, u := range []float64{0.1, 0.5, 0.8, 0.95, 0.999} {
			a := u * float64(c)
			if got, want := ErlangC(c, a), erlangCByFactorials(c, a); !near(got, want, 1e-12) {
				t.Errorf("C(%d, %g) = %.15g, factorials give %.15g", c, a, got, want)
			}
		}
	}
}

// fullRecursion is ErlangB without the warm start.
func fullRecursion(c int, a float64) float64 {
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return b
}

// TestErlangLargePools: at thousands of servers, where a^c/c! overflows,
// the warm-started recursion equals the full one and stays in [0, 1].
func TestErlangLargePools(t *testing.T) {
	for _, a := range []float64{399, 400, 1000, 4800, 20000, 100000} {
		for _, over := range []float64{0, 0.5, 1, 2, 4, 8} {
			c := int(math.Ceil(a + over*math.Sqrt(a)))
			got, want := ErlangB(c, a), fullRecursion(c, a)
			if !near(got, want, 1e-12) || got < 0 || got > 1 {
				t.Errorf("B(%d, %g) = %.15g, full recursion %.15g", c, a, got, want)
			}
			if ec := ErlangC(c, a); !(ec >= 0 && ec <= 1) {
				t.Errorf("C(%d, %g) = %v, want a probability", c, a, ec)
			}
		}
		// Below the load there is no warm start.
		c := int(a / 2)
		if got, want := ErlangB(c, a), fullRecursion(c, a); got != want {
			t.Errorf("B(%d, %g) = %.15g, full recursion %.15g", c, a, got, want)
		}
	}
	// A 5000-server pool at 96 % waits with a probability of a few tenths,
	// not 0 or NaN as the factorial formula gives.
	if ec := ErlangC(5000, 4800); !(ec > 0.001 && ec < 0.5) {
		t.Errorf("C(5000, 4800) = %v", ec)
	}
}

// TestErlangHugePools: far above the load B underflows to 0 and the
// recursion stops there, with the full recursion's answer, so a pool of
// millions of servers, or billions (a 100,000-task pool of 100,000
// slots), costs what one just past the load does.
func TestErlangHugePools(t *testing.T) {
	for _, a := range []float64{1e-9, 2, 350, 400, 1e4, 1e6} {
		for _, c := range []int{int(a) + 1000, int(a) + 1e7} {
			var cur erlangCursor
			cur.moveTo(c, a)
			if limit := warmStartLoad + 300 + int(51*math.Sqrt(a)); cur.steps > limit {
				t.Fatalf("B(%d, %g): %d steps, want at most %d", c, a, cur.steps, limit)
			}
			if c <= int(a)+1000 {
				if want := fullRecursion(c, a); cur.b != want && !(want < minNormal && cur.b == 0) {
					t.Errorf("B(%d, %g) = %g, full recursion %g", c, a, cur.b, want)
				}
			} else if cur.b != 0 || ErlangB(c, a) != 0 || ErlangC(c, a) != 0 {
				t.Errorf("B(%d, %g) = %g, C %g; want 0", c, a, cur.b, ErlangC(c, a))
			}
		}
	}
	// And so does the wait of such a pool at a light load.
	m := Model{ServiceTime: 10, Slots: 100000}
	if w := m.WaitPercentile(100000, 4, SLO{Wait: 10, Percentile: 95}); w != 0 {
		t.Errorf("wait %v, want 0", w)
	}
}
