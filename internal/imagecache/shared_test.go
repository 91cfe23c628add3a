package imagecache

import "time"

// setClaimPeriods sets how often claims are renewed and when they go stale.
func (s *Shared) setClaimPeriods(renew, stale time.Duration) {
	s.timing.claimRenew, s.timing.claimStale, s.claims.stale = renew, stale, stale
}
