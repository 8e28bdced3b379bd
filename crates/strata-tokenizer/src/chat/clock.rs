//! `strftime_now(format)`, which Llama 3 templates call for today's date: the current UTC time
//! formatted with the common `strftime` fields (`%d %m %Y %y %b %B %a %A %H %M %S %j %%`).

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::{Error, ErrorKind};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A UTC date and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CivilTime {
    year: i64,
    month: u32,
    day: u32,
    day_of_year: u32,
    weekday: usize,
    hour: u64,
    minute: u64,
    second: u64,
}

impl CivilTime {
    /// The civil date of `secs` seconds after 1970-01-01T00:00:00Z (Howard Hinnant's algorithm).
    pub(crate) fn from_unix(secs: u64) -> Self {
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let before_month =
            [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
        let day_of_year = before_month + day + u32::from(leap && month > 2);
        // 1970-01-01 was a Thursday (index 3 from Monday).
        let weekday = ((days + 3).rem_euclid(7)) as usize;
        Self {
            year,
            month,
            day,
            day_of_year,
            weekday,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }

    pub(crate) fn format(&self, format: &str) -> Result<String, Error> {
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let month = MONTHS[self.month as usize - 1];
            let weekday = WEEKDAYS[self.weekday];
            match chars.next() {
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('b') => out.push_str(&month[..3]),
                Some('B') => out.push_str(month),
                Some('a') => out.push_str(&weekday[..3]),
                Some('A') => out.push_str(weekday),
                Some('H') => out.push_str(&format!("{:02}", self.hour)),
                Some('M') => out.push_str(&format!("{:02}", self.minute)),
                Some('S') => out.push_str(&format!("{:02}", self.second)),
                Some('j') => out.push_str(&format!("{:03}", self.day_of_year)),
                Some('%') => out.push('%'),
                other => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!(
                            "strftime_now: unsupported field %{}",
                            other.map(String::from).unwrap_or_default()
                        ),
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// The template function.
pub(crate) fn strftime_now(format: String) -> Result<String, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CivilTime::from_unix(secs).format(&format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates_format_like_strftime() {
        // 2024-02-29T13:05:09Z, a Thursday, day 60 of a leap year.
        let t = CivilTime::from_unix(1_709_211_909);
        assert_eq!(
            t.format("%d %b %Y|%A %B %j %H:%M:%S %y %m %a %%").unwrap(),
            "29 Feb 2024|Thursday February 060 13:05:09 24 02 Thu %"
        );
        assert_eq!(
            CivilTime::from_unix(0).format("%Y-%m-%d %a").unwrap(),
            "1970-01-01 Thu"
        );
        assert_eq!(
            CivilTime::from_unix(951_782_400)
                .format("%Y-%m-%d %j")
                .unwrap(),
            "2000-02-29 060"
        );
        assert!(t.format("%Q").is_err());
    }
}
