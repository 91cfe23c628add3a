//go:build !faults

package faultpoint

// Reach marks a named step; without the build tag faults it does nothing.
func Reach(string) {}
