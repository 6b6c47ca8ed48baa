// JSON helpers for the wire protocol. Job ids and lease tokens are 64-bit
// integers (lease tokens are random 63-bit numbers), which JSON.parse
// rounds to the nearest double. Messages from Redis are therefore split
// into their top-level fields as raw text first; ids and tokens are kept as
// decimal strings and every other field is parsed on its own.

/** A JSON object's top-level fields, each as its raw JSON text. */
export type RawFields = Map<string, string>;

/**
 * rawFields splits the JSON object text into its top-level fields, each
 * value left as its raw text (a later duplicate key wins, as in Go). It
 * throws a SyntaxError when text is not one JSON object.
 */
export function rawFields(text: string): RawFields {
  const out: RawFields = new Map();
  let i = skipSpace(text, 0);
  if (text[i] !== "{") throw new SyntaxError("not a JSON object");
  i = skipSpace(text, i + 1);
  if (text[i] === "}") {
    if (skipSpace(text, i + 1) !== text.length) throw new SyntaxError("text after the JSON object");
    return out;
  }
  for (;;) {
    if (text[i] !== '"') throw new SyntaxError(`expected a key at ${i}`);
    const keyEnd = skipString(text, i);
    const key = plainString(text, i, keyEnd) ?? (JSON.parse(text.slice(i, keyEnd)) as string);
    i = skipSpace(text, keyEnd);
    if (text[i] !== ":") throw new SyntaxError(`expected ':' at ${i}`);
    const start = skipSpace(text, i + 1);
    const end = skipValue(text, start);
    out.set(key, text.slice(start, end));
    i = skipSpace(text, end);
    if (text[i] === ",") {
      i = skipSpace(text, i + 1);
      continue;
    }
    if (text[i] === "}") break;
    throw new SyntaxError(`expected ',' or '}' at ${i}`);
  }
  if (skipSpace(text, i + 1) !== text.length) throw new SyntaxError("text after the JSON object");
  return out;
}

// plainString returns the string s[start:end] (a JSON string, quotes
// included) without parsing when it holds no escape or control character,
// which JSON.parse would have to check or refuse; else undefined.
function plainString(s: string, start: number, end: number): string | undefined {
  for (let j = start + 1; j < end - 1; j++) {
    const c = s.charCodeAt(j);
    if (c === 0x5c || c < 0x20) return undefined;
  }
  return s.slice(start + 1, end - 1);
}

function skipSpace(s: string, i: number): number {
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

// skipString returns the index just past the string that starts at i (a '"').
function skipString(s: string, i: number): number {
  i++;
  for (;;) {
    const q = s.indexOf('"', i);
    if (q < 0) throw new SyntaxError("unterminated string");
    let bs = 0; // backslashes just before the quote: an odd count escapes it
    for (let j = q - 1; j >= i && s.charCodeAt(j) === 0x5c; j--) bs++;
    if (bs % 2 === 0) return q + 1;
    i = q + 1;
  }
}

// skipValue returns the index just past the JSON value that starts at i.
// Nested values are only delimited here; each field is checked in full when
// it is parsed.
function skipValue(s: string, i: number): number {
  const c = s[i];
  if (c === '"') return skipString(s, i);
  if (c === "{" || c === "[") {
    let depth = 0;
    while (i < s.length) {
      const ch = s[i];
      if (ch === '"') {
        i = skipString(s, i);
        continue;
      }
      if (ch === "{" || ch === "[") depth++;
      else if (ch === "}" || ch === "]") {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    throw new SyntaxError("unterminated object or array");
  }
  const start = i;
  while (i < s.length) {
    const ch = s.charCodeAt(i);
    if (ch === 0x2c || ch === 0x7d || ch === 0x5d || ch === 0x20 || ch === 0x09 || ch === 0x0d || ch === 0x0a) break;
    i++;
  }
  if (i === start) throw new SyntaxError(`expected a value at ${start}`);
  return i;
}

const int64Max = 2n ** 63n - 1n;
const shortInt = /^(0|-?[1-9][0-9]{0,17})$/;
const longInt = /^[1-9][0-9]{18}$/;
const int64MaxText = int64Max.toString();

/**
 * int64Field returns the field's value as a decimal string when it is a
 * JSON integer within int64, "0" when it is absent or null, and throws
 * otherwise. No precision is lost: the digits are never a JS number.
 */
export function int64Field(f: RawFields, key: string): string {
  const raw = f.get(key);
  if (raw === undefined || raw === "null") return "0";
  if (shortInt.test(raw)) return raw; // 18 digits at most: within int64, and already canonical
  // 19 digits (as most lease tokens, random up to 2^63-1): compared as text.
  if (raw.length === 19 && longInt.test(raw) && raw <= int64MaxText) return raw;
  if (!/^-?(0|[1-9][0-9]*)$/.test(raw)) throw new SyntaxError(`${key} is not an integer`);
  const v = BigInt(raw);
  if (v > int64Max || v < -int64Max - 1n) throw new SyntaxError(`${key} is out of the int64 range`);
  return v.toString();
}

/** field parses one field's raw text, or returns undefined when it is absent. */
export function field(f: RawFields, key: string): unknown {
  const raw = f.get(key);
  if (raw === undefined) return undefined;
  if (raw.length > 1 && raw.charCodeAt(0) === 0x22 && raw.charCodeAt(raw.length - 1) === 0x22) {
    const s = plainString(raw, 0, raw.length);
    if (s !== undefined && !s.includes('"')) return s;
  } else if (smallInt.test(raw)) {
    return Number(raw);
  }
  return JSON.parse(raw);
}

const smallInt = /^(0|-?[1-9][0-9]{0,14})$/; // exact as a double

/**
 * RawJSON is a value already encoded as JSON text: a handler that returns
 * one has that text stored as the job's result, byte for byte (for a
 * payload passed on unchanged, or numbers beyond 2^53).
 */
export class RawJSON {
  readonly text: string;
  constructor(text: string) {
    JSON.parse(text); // refuse text that is not JSON
    this.text = text;
  }
}

/**
 * encodeResult returns the JSON text of a handler's return value, or
 * undefined for none (undefined or null). It throws when the value does not
 * encode (a BigInt, a cycle).
 */
export function encodeResult(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (v instanceof RawJSON) return v.text;
  const s = JSON.stringify(v);
  if (s === undefined) throw new TypeError(`a ${typeof v} has no JSON form`);
  return s;
}
