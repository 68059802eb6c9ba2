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
