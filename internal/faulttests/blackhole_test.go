package faulttests

import "testing"

func (s *suite) blackhole(t *testing.T) { t.Skip("not yet") }
