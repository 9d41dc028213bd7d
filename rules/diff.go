package rules

import (
	"maps"
	"slices"
)

// A Diff says how the limits of two sets relate, by [Limit.ID]: what a
// reload keeps, changes, starts and drops. Each list is in the order of the
// set it comes from (Removed: the old set's; the others: the new set's).
type Diff struct {
	// Unchanged limits count alike in both sets: the same policy, key spec
	// and overrides. Their state carries over as it is. Their cost, failure
	// policy, shadow mode or rule's match may differ: read those from the new
	// set's Limit.
	Unchanged []string
	// Changed limits are in both sets but count differently.
	Changed []Change
	// Added limits are in the new set only: they start empty.
	Added []string
	// Removed limits are in the old set only: their state can be dropped.
	Removed []string
}

// A Change is a limit in both sets of a [Diff] that counts differently.
type Change struct {
	// ID is the limit's identity.
	ID string
	// Old and New are the limit in the old and the new set.
	Old, New *Limit
	// Policy is true when the base policy differs: a key's usage carries
	// over to the new policy.
	Policy bool
	// Key is true when the key spec differs: the limit counts per
	// something else, and keys of the old spec mean nothing under the new.
	Key bool
	// Overrides is true when the set's overrides for the limit differ.
	Overrides bool
}

// Compare returns how the limits of old and new relate. A nil set is an
// empty one: every limit of new is Added, or of old Removed.
func Compare(old, new *Set) Diff {
	var d Diff
	if new == nil {
		new = &Set{}
	}
	var oldByID map[string]*Limit
	if old != nil {
		oldByID = old.byID
	}
	for _, nl := range new.limits {
		ol := oldByID[nl.id]
		if ol == nil {
			d.Added = append(d.Added, nl.id)
			continue
		}
		c := Change{
			ID:        nl.id,
			Old:       ol,
			New:       nl,
			Policy:    ol.policy != nl.policy,
			Key:       !slices.Equal(ol.keySpec, nl.keySpec),
			Overrides: !maps.Equal(ol.overrides, nl.overrides),
		}
		if c.Policy || c.Key || c.Overrides {
			d.Changed = append(d.Changed, c)
		} else {
			d.Unchanged = append(d.Unchanged, nl.id)
		}
	}
	if old != nil {
		for _, ol := range old.limits {
			if new.byID[ol.id] == nil {
				d.Removed = append(d.Removed, ol.id)
			}
		}
	}
	return d
}
