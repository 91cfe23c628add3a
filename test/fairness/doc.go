// Package fairness holds the tests, on the real test bed, that one namespace's broken
// resources do not starve another's, and that an unrelated inactive pool does not block
// deleting an unused BaseImage (decision 48).
package fairness
