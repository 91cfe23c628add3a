// Package faulttests is the fault suite of issue 14 (make test-faults, docs/testing.md): the
// real provider, built with the build tag faults (internal/faultpoint), runs as a process
// against a real kube-apiserver and etcd and the test bed's libvirtd and sshd, and the suite
// breaks it: SIGKILLs it between named steps of creating and deleting each kind, blackholes a
// host while another keeps working. Each case then checks that every resource gets back to
// Ready (or is gone, for deletes) within a stated bound, that nothing it made is left on the
// host (domains, pool files: volumes, markers, claims and owner records, NVRAM files), and
// that no domain ever ran on a base volume without a valid published marker whose size and
// sha256 match the file. It prints a table of the cases and writes it to
// _output/faults/results.txt.
//
// go test runs a fast subset (a few kill points and a 30 s blackhole); FAULTS_FULL=1 (make
// test-faults) runs every kill point and a two-minute blackhole.
package faults
