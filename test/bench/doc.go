// Package observebench measures what a steady-state Observe costs on the real test bed
// (`make bench-observe`): libvirt calls and new libvirt connections per Observe of a Ready,
// unchanged BaseImage, SeedVolume and KVMDomain, with 1, 10 and 100 of each on one host,
// counted with the provider's own metrics (internal/metrics) and controller-runtime's
// reconcile counter.
package bench
