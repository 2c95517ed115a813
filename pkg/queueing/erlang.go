package queueing

import "math"

// ErlangB is the blocking probability of c servers offered a erlangs with
// no queue (M/M/c/c), by the recursion B(0) = 1,
// B(k) = a·B(k−1) / (k + a·B(k−1)). Each step only divides numbers in
// [0, 1], so nothing overflows at any c.
//
// Far above the load B falls by about a/k a step and is below the
// smallest normal float64 within about 38√a steps of the load, or a few
// hundred below warmStartLoad: it is 0 from there, and the recursion
// stops, so a pool of any size costs no more (a 100,000-task pool of
// 100,000 slots at a few requests a second was two billion steps, most
// of a minute, before it did).
//
// For a large offered load and c ≥ a the recursion starts near
// k0 = a − 12√a from B(k0) ≈ 1 − k0/a, the limit of B below the load: near
// that fixed point each step shrinks an error by about k/a, so by k = a the
// start's error has shrunk by about e^−72 and the result is the full
// recursion's, in O(√a + c − a) steps instead of O(c).
func ErlangB(c int, a float64) float64 {
	if c <= 0 || !(a > 0) {
		if c <= 0 {
			return 1
		}
		return 0
	}
	if math.IsInf(a, 1) {
		return 1
	}
	var cur erlangCursor
	cur.moveTo(c, a)
	return cur.b
}

// warmStartLoad is the offered load from which ErlangB skips the steps far
// below the load; below it the full recursion is cheap.
const warmStartLoad = 400

// minNormal is the smallest normal float64, 2^−1022: a blocking
// probability below it is 0 to every use.
const minNormal = 0x1p-1022

func warmStart(c int, a float64) (int, float64) {
	if a < warmStartLoad || float64(c) < a {
		return 0, 1
	}
	k0 := math.Floor(a - 12*math.Sqrt(a))
	return int(k0), 1 - k0/a
}

// ErlangC is the probability that a request waits at all in an M/M/c
// queue offered a erlangs (a = arrival rate × mean service time). It is 1
// when the servers cannot keep up (a ≥ c), and 0 with no load.
func ErlangC(c int, a float64) float64 {
	if !(a > 0) {
		return 0
	}
	if a >= float64(c) {
		return 1
	}
	b := ErlangB(c, a)
	return float64(c) * b / (float64(c) - a*(1-b))
}
