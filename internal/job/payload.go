package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits of a JSON value PostgreSQL stores as jsonb.
const (
	// MaxJSONDepth is how deeply arrays and objects may nest.
	MaxJSONDepth = 1000

	// PostgreSQL's numeric, which jsonb stores numbers as, refuses more
	// digits than these before and after the decimal point.
	maxNumericIntDigits  = 131072
	maxNumericFracDigits = 16383
)

// NormalizeJSON returns a JSON value compacted (absent means null; raw
// itself when it is compact already), or
// why it is refused. Submitted payloads and handlers' results pass the same
// rules, so that whatever is accepted is storable. Beyond being valid JSON,
// a value must be storable as PostgreSQL jsonb (no \u0000, no unpaired UTF-16 surrogate, valid UTF-8,
// numbers within numeric's range) and at most maxPayload bytes as
// PostgreSQL will print it (numbers written out in full; "1e300" counts as
// 301 bytes, so a small body cannot become a huge job).
func NormalizeJSON(raw json.RawMessage, maxPayload int) (json.RawMessage, error) {
	return normalizeJSON(raw, maxPayload, false)
}

// NormalizeDecodedJSON is NormalizeJSON for a value that encoding/json
// decoded into a json.RawMessage, which is valid JSON by construction: a
// compact one is not validated again. That second look was most of the
// cost of a large payload's submission after the decoding itself.
func NormalizeDecodedJSON(raw json.RawMessage, maxPayload int) (json.RawMessage, error) {
	return normalizeJSON(raw, maxPayload, true)
}

func normalizeJSON(raw json.RawMessage, maxPayload int, decoded bool) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("must be valid UTF-8")
	}
	// Without a space, tab or line break anywhere the value is compact
	// already: it is checked but not copied (a string can hold no raw tab
	// or line break, and one with a space takes the copying way).
	out := []byte(raw)
	if !bytes.ContainsAny(raw, " \t\r\n") {
		if !decoded && !json.Valid(raw) {
			return nil, errors.New("must be valid JSON")
		}
	} else {
		var buf bytes.Buffer
		buf.Grow(len(raw))
		if err := json.Compact(&buf, raw); err != nil {
			return nil, errors.New("must be valid JSON")
		}
		out = buf.Bytes()
	}
	size, err := scanPayload(out)
	if err != nil {
		return nil, err
	}
	if size > maxPayload {
		return nil, fmt.Errorf("is %d bytes encoded, at most %d are allowed", size, maxPayload)
	}
	return json.RawMessage(out), nil
}

// scanPayload walks compact, valid JSON and returns its size with every
// number counted as written out in full, or an error for what jsonb would
// refuse or what is nested too deeply.
func scanPayload(b []byte) (int, error) {
	size, depth := len(b), 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '[' || c == '{':
			depth++
			if depth > MaxJSONDepth {
				return 0, fmt.Errorf("is nested deeper than %d levels", MaxJSONDepth)
			}
			i++
		case c == ']' || c == '}':
			depth--
			i++
		case c == '"':
			n, err := scanString(b[i:])
			if err != nil {
				return 0, err
			}
			i += n
		case c == '-' || (c >= '0' && c <= '9'):
			n, expanded, err := scanNumber(b[i:])
			if err != nil {
				return 0, err
			}
			if expanded > n {
				size += expanded - n
			}
			i += n
		default: // , : true false null
			i++
		}
	}
	return size, nil
}

// scanString returns the length of the JSON string at the start of b
// (quotes included) and refuses the escapes jsonb cannot store: \u0000 and
// unpaired surrogates.
func scanString(b []byte) (int, error) {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if i+1 < len(b) && b[i+1] == 'u' {
				r, ok := hex4(b, i+2)
				if !ok {
					return 0, errors.New("must be valid JSON")
				}
				switch {
				case r == 0:
					return 0, errors.New(`must not contain \u0000 (PostgreSQL cannot store it)`)
				case r >= 0xD800 && r < 0xDC00: // high surrogate: a low one must follow
					lo, ok := rune(0), i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u'
					if ok {
						lo, ok = hex4(b, i+8)
					}
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return 0, errors.New("must not contain an unpaired UTF-16 surrogate escape")
					}
					i += 11
				case r >= 0xDC00 && r <= 0xDFFF:
					return 0, errors.New("must not contain an unpaired UTF-16 surrogate escape")
				default:
					i += 5
				}
				continue
			}
			i++ // skip the escaped character
		}
	}
	return 0, errors.New("must be valid JSON")
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(v), err == nil
}

// scanNumber returns the length of the JSON number at the start of b and
// the length PostgreSQL prints it with, or an error if numeric cannot hold
// it.
func scanNumber(b []byte) (n, expanded int, err error) {
	i := 0
	if b[i] == '-' {
		i++
	}
	intDigits, fracDigits := 0, 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
		intDigits++
	}
	if i < len(b) && b[i] == '.' {
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			fracDigits++
		}
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if exp < 10_000_000 { // saturate: far past any limit below
				exp = exp*10 + int(b[i]-'0')
			}
			i++
		}
		if neg {
			exp = -exp
		}
	}
	whole, frac := max(intDigits+exp, 1), max(fracDigits-exp, 0)
	if whole > maxNumericIntDigits || frac > maxNumericFracDigits {
		return 0, 0, errors.New("holds a number out of range (PostgreSQL numeric allows 131072 digits before the point and 16383 after)")
	}
	return i, whole + frac + 2, nil // sign and point
}

// MaxNameLen is the most characters a job name (job type) may have; the
// jobs table checks it too.
const MaxNameLen = 128

// CheckText returns why s is not acceptable as a name or id of at most max
// characters, or "" if it is: valid UTF-8 without control characters. Job
// names, worker ids and the job types a worker names all pass it, so that a
// NUL or an invalid byte cannot reach a statement and fail its batch.
func CheckText(s string, max int) string {
	if s == "" {
		return "must not be empty"
	}
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	if n := utf8.RuneCountInString(s); n > max {
		return fmt.Sprintf("is %d characters long, at most %d are allowed", n, max)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "must not contain control characters"
		}
	}
	return ""
}
