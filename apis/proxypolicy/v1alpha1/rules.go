package v1alpha1

// Rules are the platform's rules for every Proxy: what a team may ask for, and what it may
// reach.
type Rules struct{}
