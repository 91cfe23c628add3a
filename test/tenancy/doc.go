// Package tenancytests plays a second team on a host shared with a first one: against a real
// API server, the real controllers and the real libvirt test bed, each test tries to read,
// change or delete the first team's objects, and asserts the refusal and that those objects
// are byte for byte unchanged on the host.
package tenancy
