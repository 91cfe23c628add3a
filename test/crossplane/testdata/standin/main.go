// Command standin is what TestXpkgBuild packages instead of cmd/provider and cmd/function: a
// static binary that builds in seconds for every architecture the packages ship, so that the
// test checks the real cross-compile and each image's ELF machine without building the
// provider twice.
package main

import "fmt"

func main() { fmt.Println("stand-in") }
