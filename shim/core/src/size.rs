//! Byte sizes as people write them (`20GiB`, `20G`, `512MiB`, `85%`) and as logs show them.

/// One KiB/MiB/GiB/TiB step; decimal suffixes (`GB`) are read as binary too, the way
/// `nvidia-smi`, `rocm-smi` and PyTorch's messages use them.
const UNITS: [(&str, u64); 5] = [
    ("t", 1 << 40),
    ("g", 1 << 30),
    ("m", 1 << 20),
    ("k", 1 << 10),
    ("b", 1),
];

/// Parses `20GiB`, `20G`, `20gb`, `1.5GiB`, `512MiB`, `4096` (bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{}` is not a size (try 20GiB or 512MiB)", text))?;
    let multiplier = if unit.is_empty() {
        1
    } else {
        let head = &unit[..1];
        let rest = &unit[1..];
        let known = matches!(rest, "" | "b" | "ib" | "i");
        match UNITS.iter().find(|(u, _)| *u == head) {
            Some((_, m)) if known || (head == "b" && rest.is_empty()) => *m,
            _ => {
                return Err(format!(
                    "`{}` has an unknown unit (use B, KiB, MiB, GiB or TiB)",
                    text
                ))
            }
        }
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{}` is out of range", text));
    }
    Ok(bytes.round() as u64)
}

/// A limit that is either absolute or a share of the device's total memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    Bytes(u64),
    /// 0 <= percent <= 100.
    Percent(f64),
}

impl Limit {
    pub fn parse(text: &str) -> Result<Limit, String> {
        let t = text.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("`{}` is not a percentage", text))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("`{}` must be from 0% to 100%", text));
            }
            return Ok(Limit::Percent(v));
        }
        // A limit may also be a share: say so where a plain size's hint would not.
        parse_size(t).map(Limit::Bytes).map_err(|e| {
            e.replace(
                "(try 20GiB or 512MiB)",
                "(try 20GiB, 512MiB or a share such as 85%)",
            )
        })
    }

    /// The limit in bytes for a device of `total` bytes.
    pub fn resolve(self, total: u64) -> u64 {
        match self {
            Limit::Bytes(b) => b,
            Limit::Percent(p) => (total as f64 * p / 100.0) as u64,
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Bytes(b) => f.write_str(&format_size(*b)),
            Limit::Percent(p) => write!(f, "{}%", p),
        }
    }
}

/// `19.20 GiB`, `64.0 MiB`, `512 B`: the unit that keeps the number readable.
pub fn format_size(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{} B", bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_people_write() {
        assert_eq!(parse_size("20GiB"), Ok(20 << 30));
        assert_eq!(parse_size("20G"), Ok(20 << 30));
        assert_eq!(parse_size("20 gb"), Ok(20 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("7b"), Ok(7));
        assert!(parse_size("20XB").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn limits() {
        assert_eq!(Limit::parse("85%"), Ok(Limit::Percent(85.0)));
        assert_eq!(Limit::parse("8GiB"), Ok(Limit::Bytes(8 << 30)));
        assert_eq!(Limit::parse("0%"), Ok(Limit::Percent(0.0)));
        assert!(Limit::parse("150%").is_err());
        assert_eq!(Limit::Percent(50.0).resolve(16 << 30), 8 << 30);
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(20 << 30), "20.00 GiB");
        assert_eq!(format_size(64 << 20), "64.0 MiB");
        assert_eq!(format_size(512), "512 B");
    }
}
