// Times as OAP writes them (tlog/formats/times.py): RFC 3339 in UTC with a "Z" and at
// most 6 fraction digits, so one instant has one spelling in signed data. Instants are
// BigInt microseconds since the epoch, so comparisons are exact (as Python's datetime).
import { InvalidInput } from './errors.js';

/** RFC 3339 UTC with "Z" and at most 6 fraction digits (times.py parse_utc)
 * -> BigInt microseconds since the epoch; InvalidInput otherwise. */
export function parseUtc(value, field) {
  const m = typeof value === 'string' ? /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?Z$/.exec(value) : null;
  if (!m) throw new InvalidInput(`${field} must be an RFC 3339 UTC time like 2026-01-02T03:04:05Z`);
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number);
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const dim = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1];
  if (y < 1 || !dim || d < 1 || d > dim || h > 23 || mi > 59 || s > 59) throw new InvalidInput(`${field} is not a valid date and time`);
  // days from civil (H. Hinnant), exact for the whole proleptic Gregorian calendar
  const yy = mo <= 2 ? y - 1 : y, era = Math.floor(yy / 400), yoe = yy - era * 400;
  const doy = Math.floor((153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const days = era * 146097 + yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy - 719468;
  const micro = BigInt((m[7] || '0').padEnd(6, '0'));
  return (BigInt(days) * 86400n + BigInt(h * 3600 + mi * 60 + s)) * 1000000n + micro;
}
export const microsToDate = (us) => new Date(Number(us / 1000n));
export const dateToMicros = (d) => BigInt(d.getTime()) * 1000n;

/** The one spelling parseUtc reads back to the same instant (times.py format_utc). */
export function formatUtc(us) {
  const frac = ((us % 1000000n) + 1000000n) % 1000000n; // floored: an instant before 1970 has a positive fraction
  const d = new Date(Number((us - frac) / 1000000n) * 1000);
  const text = d.toISOString().slice(0, 19);
  return text + (frac ? '.' + frac.toString().padStart(6, '0').replace(/0+$/, '') : '') + 'Z';
}
