// Package queueing is the law behind the SLO scaling policy: how many tasks
// a pool needs so that requests wait less than a given time at a given
// percentile. The pool is modelled as one queue in front of all its slots
// (c = tasks × slotsPerTask servers), which is what a router that sends
// each request to the least-loaded worker approximates:
//
//   - Erlang C gives the chance that a request waits at all, for Poisson
//     arrivals and exponential service (M/M/c). It is computed from the
//     Erlang-B recursion, which stays accurate at thousands of servers
//     where the textbook formula's factorials overflow.
//   - The Allen–Cunneen approximation stretches the M/M/c wait by
//     v = (Ca² + Cs²)/2, the squared coefficients of variation of the
//     inter-arrival and service times: bursty arrivals (Ca² > 1) need more
//     headroom, regular ones less. Waiting at all is taken from Erlang C
//     with the spare slots divided by √v (the Halfin–Whitt scaling), which
//     a simulated G/G/c queue confirms where Erlang C alone underestimates
//     the tail of bursty arrivals several times over.
//   - Tasks inverts the tail: the smallest task count whose wait
//     percentile is within the SLO.
//
// The estimators (estimate.go) turn a load-index source's readings into the
// model's inputs: the arrival rate (also from completions alone), the
// service time by Little's law, Ca² from the dispersion of per-interval
// arrival counts, the trend of the arrival rate, the backlog of waiting
// requests, and a bounded correction from an observed wait percentile.
//
// Everything here is pure: numbers in, numbers out, no clock.
package queueing
