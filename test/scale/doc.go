// Package scale holds the scale bench: one provider process carrying many managed resources on
// one host of the test bed, or split evenly over the LAN bed's two hosts (SCALE_HOSTS=lan, run
// inside netns node), measured from its metrics endpoint and ss (docs/performance.md). Its short
// run (50 KVMDomains, one host) is part of make test and asserts what does not depend on the
// machine's speed; make bench-scale and make bench-scale-lan run the steps of 50 to 1,000 and
// print every figure.
package scale
