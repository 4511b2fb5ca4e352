// Package lockorder holds the test that checks the code against
// docs/locks.md, the connector's lock order: a static check in the manner
// of go vet, which finds every place a lock is taken while another is held
// (directly, or in a function called meanwhile) and fails on an order the
// document does not give. It has no code of its own beyond its tests.
package lockorder
