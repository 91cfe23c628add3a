// Package scale holds the scale bench: one provider process carrying many managed resources on
// one host of the test bed, measured from its metrics endpoint and ss (docs/performance.md).
// Its short run (50 KVMDomains) is part of make test and asserts what does not depend on the
// machine's speed; make bench-scale runs the steps of 50 to 1,000 and prints every figure.
package scale
