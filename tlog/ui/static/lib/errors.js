// Typed errors, named after the Python hierarchy in tlog/errors.py so a verdict
// reads the same in both implementations. Every verifier throws one of these;
// none returns a bool a caller could ignore. `reason` is the human sentence.
export class OAPError extends Error {
  constructor(reason) {
    super(reason);
    this.name = new.target.name;
    this.reason = reason;
  }
}
/** Malformed wire format or input (Python: FormatError / InvalidInput, HTTP 400). */
export class FormatError extends OAPError {}
export class InvalidInput extends OAPError {}
/** A rule refuses it (Python: Forbidden, HTTP 403 `policy_block`): `witness` and `rule` say
 * who and why when an independence rule refused a witness or an auditor. */
export class Forbidden extends OAPError {
  constructor(reason, { witness = null, rule = null } = {}) { super(reason); this.witness = witness; this.rule = rule; }
}
/** Something presented as proof did not verify (Python: VerificationError, 422). */
export class VerificationError extends OAPError {}
export class SignatureError extends VerificationError {}
export class UnknownKeyError extends VerificationError {
  constructor(reason, names = []) { super(reason); this.names = names; }
}
export class InclusionProofError extends VerificationError {}
export class ConsistencyProofError extends VerificationError {}
export class PolicyError extends VerificationError {}
export class StatusVerificationError extends VerificationError {}

/** Python's `except InvalidInput` (FormatError is a subclass of InvalidInput there). */
export const isInvalid = (e) => e instanceof InvalidInput || e instanceof FormatError;

/** Python's str() of a JSON value in an f-string (None, True, a list...), for reasons. */
export function pyStr(v) {
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (Array.isArray(v)) return `[${v.map(pyReprValue).join(', ')}]`;
  if (typeof v === 'object' && 'value' in v && Object.keys(v).length === 1) return String(v.value); // a JSONFloat
  return `{${Object.entries(v).map(([k, x]) => `${pyRepr(k)}: ${pyReprValue(x)}`).join(', ')}}`;
}
const pyReprValue = (v) => (typeof v === 'string' ? pyRepr(v) : pyStr(v));

// Python's repr() of a str, so reasons that quote a name, origin or vkey read exactly
// as the Python verifiers word them (`{name!r}`): single quotes unless the text holds
// a ' and no ", backslash and the quote escaped, non-printable characters as
// \xNN / \uNNNN / \UNNNNNNNN (str.isprintable: categories C*, Z* except the space).
const NON_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
export function pyRepr(s) {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    if (ch === quote || ch === '\\') out += '\\' + ch;
    else if (ch === '\t') out += '\\t';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch !== ' ' && NON_PRINTABLE.test(ch)) {
      out += cp < 0x100 ? '\\x' + cp.toString(16).padStart(2, '0')
        : cp < 0x10000 ? '\\u' + cp.toString(16).padStart(4, '0') : '\\U' + cp.toString(16).padStart(8, '0');
    } else out += ch;
  }
  return out + quote;
}

/** Python's sorted() order for str: by code point (JS's default sort is by UTF-16 unit,
 * which differs for characters beyond U+FFFF vs U+E000..U+FFFF). */
export function pySorted(strings) {
  const cps = (s) => Array.from(s, (c) => c.codePointAt(0));
  return [...strings].sort((a, b) => {
    const x = cps(a), y = cps(b);
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
    return x.length - y.length;
  });
}
