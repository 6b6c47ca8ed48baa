package wire

import (
	"slices"
	"strings"
)

// MaxWakeNames bounds the job names one wake-up carries; a wake-up for
// more names says "any name" instead.
const MaxWakeNames = 32

// Wake is a wake-up from a submitter to the leader's dispatcher: jobs were
// made due. Wake-ups are merged while one is pending (Merge).
type Wake struct {
	// Limited: some of the jobs have a limit_key (or an operator's action
	// may have made such jobs claimable).
	Limited bool
	// Names are the names of the jobs made due, sorted; nil means any name
	// (an operator's action, more than MaxWakeNames names, or a submitter
	// that does not say).
	Names []string
}

// The payloads, published on the wake-up channel: "1" any name, "l"
// limited (any name), "n" followed by the names separated by "\n" (names
// hold no control characters). A payload this code does not know is read
// as limited and any name: the safe reading, which costs only a claim.
const (
	wakeAny     = "1"
	wakeLimited = "l"
	wakeNamed   = "n"
)

// FormatWake encodes a wake-up's payload.
func FormatWake(w Wake) string {
	switch {
	case w.Limited:
		return wakeLimited
	case w.Names == nil:
		return wakeAny
	}
	return wakeNamed + strings.Join(w.Names, "\n")
}

// ParseWake decodes a wake-up's payload.
func ParseWake(s string) Wake {
	switch {
	case s == wakeAny:
		return Wake{}
	case strings.HasPrefix(s, wakeNamed) && len(s) > 1:
		names := strings.Split(s[1:], "\n")
		if len(names) > MaxWakeNames {
			return Wake{}
		}
		slices.Sort(names)
		return Wake{Names: slices.Compact(names)}
	}
	return Wake{Limited: true}
}

// Merge returns one wake-up as good as both: limited if either is, any
// name if either says so or their names together are more than
// MaxWakeNames.
func (w Wake) Merge(o Wake) Wake {
	out := Wake{Limited: w.Limited || o.Limited}
	if w.Names == nil || o.Names == nil || out.Limited {
		return out
	}
	names := append(slices.Clone(w.Names), o.Names...)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > MaxWakeNames {
		return out
	}
	out.Names = names
	return out
}

// Handles reports whether the wake-up may concern a worker group handling
// types (nil: any name): true for any name, else if one of its names is
// among types (any of them, for types nil).
func (w Wake) Handles(types []string) bool {
	if w.Names == nil {
		return true
	}
	if types == nil {
		return len(w.Names) > 0
	}
	for _, n := range w.Names {
		if slices.Contains(types, n) {
			return true
		}
	}
	return false
}
