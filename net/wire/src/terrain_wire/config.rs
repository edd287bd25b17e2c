//! `[server.terrain_wire]`: the sample type, compression and chunking of the terrain
//! messages, validated once at startup (`TerrainConfigError` names the key).

use serde::Deserialize;
use thiserror::Error;

/// Height samples on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE-754 binary32, metres.
    F32,
    /// Quantised to 0..=65535 over a min/max range in metres.
    Uint16,
    /// IEEE-754 binary64, metres (exact: every millimetre height is h_mm / 1000).
    F64,
}

impl Dtype {
    /// The config spelling, also what a WELCOME message can carry.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Uint16 => "uint16",
            Dtype::F64 => "f64",
        }
    }

    /// Bytes per sample on the wire.
    pub fn sample_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Uint16 => 2,
            Dtype::F64 => 8,
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Dtype::F32 => 0,
            Dtype::Uint16 => 1,
            Dtype::F64 => 2,
        }
    }

    pub(super) fn from_code(code: u8) -> Option<Dtype> {
        match code {
            0 => Some(Dtype::F32),
            1 => Some(Dtype::Uint16),
            2 => Some(Dtype::F64),
            _ => None,
        }
    }
}

/// Codec for the grid payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The server's choice, currently zstd. Never on the wire.
    Auto,
    Zstd,
    /// Needs the cargo feature `terrain-lz4`.
    Lz4,
    None,
}

impl Compression {
    /// The config spelling, also what a WELCOME message can carry.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Auto => "auto",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
            Compression::None => "none",
        }
    }

    /// The codec `auto` stands for; every other value is itself.
    pub fn resolve(self) -> Compression {
        match self {
            Compression::Auto => Compression::Zstd,
            c => c,
        }
    }

    pub fn code(self) -> u8 {
        match self.resolve() {
            Compression::None => 0,
            Compression::Zstd => 1,
            // Auto resolved above; listed so the match stays exhaustive without a wildcard.
            Compression::Lz4 | Compression::Auto => 2,
        }
    }

    pub(super) fn from_code(code: u8) -> Option<Compression> {
        match code {
            0 => Some(Compression::None),
            1 => Some(Compression::Zstd),
            2 => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// Where the uint16 range comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantizationRange {
    /// The grid's own min and max.
    Auto,
    /// `quantization_min` / `quantization_max`; heights outside are clamped.
    Fixed,
}

/// `[server.terrain_wire]`. Key names follow the reference Python server.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TerrainWireConfig {
    pub dtype: Dtype,
    pub compression: Compression,
    /// Deliver chunked when the whole grid's compressed payload is at least this many bytes.
    pub chunk_transport_threshold_bytes: u64,
    /// Uncompressed bytes per chunk (whole rows; at least one row even if a row is larger).
    pub chunk_target_bytes: u64,
    pub quantization_range: QuantizationRange,
    /// Metres; required with `quantization_range = "fixed"`, refused otherwise.
    pub quantization_min: Option<f64>,
    /// Metres; required with `quantization_range = "fixed"`, refused otherwise.
    pub quantization_max: Option<f64>,
}

impl Default for TerrainWireConfig {
    fn default() -> Self {
        TerrainWireConfig {
            dtype: Dtype::F32,
            compression: Compression::Auto,
            chunk_transport_threshold_bytes: 524_288,
            chunk_target_bytes: 524_288,
            quantization_range: QuantizationRange::Auto,
            quantization_min: None,
            quantization_max: None,
        }
    }
}

/// A `[server.terrain_wire]` value that cannot be used, or a grid that cannot be encoded
/// with it: the server refuses to start, naming the key.
#[derive(Debug, Error, PartialEq)]
#[error("server.terrain_wire.{key}: {reason}")]
pub struct TerrainConfigError {
    pub key: &'static str,
    pub reason: String,
}

pub(super) fn config_err(key: &'static str, reason: impl Into<String>) -> TerrainConfigError {
    TerrainConfigError {
        key,
        reason: reason.into(),
    }
}

impl TerrainWireConfig {
    /// Checks the config once at startup, so a bad value stops the server with the key's name
    /// instead of surfacing when the first client connects.
    pub fn validate(&self) -> Result<(), TerrainConfigError> {
        self.validate_with(cfg!(feature = "terrain-lz4"))
    }

    /// [`validate`](Self::validate) with the lz4 feature as a parameter, so the refusal of lz4 in
    /// a build without it is testable from a build with it.
    pub(super) fn validate_with(&self, lz4_built: bool) -> Result<(), TerrainConfigError> {
        if self.compression == Compression::Lz4 && !lz4_built {
            return Err(config_err(
                "compression",
                "\"lz4\" needs migratory-wire built with the cargo feature `terrain-lz4`, which this \
                 build lacks; use \"zstd\", \"none\" or \"auto\", or rebuild with --features terrain-lz4",
            ));
        }
        if self.chunk_target_bytes < 1024 {
            return Err(config_err(
                "chunk_target_bytes",
                format!("must be at least 1024, is {}", self.chunk_target_bytes),
            ));
        }
        if self.chunk_transport_threshold_bytes < 1 {
            return Err(config_err(
                "chunk_transport_threshold_bytes",
                "must be at least 1, is 0",
            ));
        }
        match self.quantization_range {
            QuantizationRange::Auto => {
                // Explicit beats silent: a range that would be ignored is most likely a forgotten
                // `quantization_range = "fixed"`.
                for (key, value) in [
                    ("quantization_min", self.quantization_min),
                    ("quantization_max", self.quantization_max),
                ] {
                    if value.is_some() {
                        return Err(config_err(
                            key,
                            "is set but quantization_range is \"auto\" (the grid's own min/max); \
                             remove it or set quantization_range = \"fixed\"",
                        ));
                    }
                }
            }
            QuantizationRange::Fixed => {
                if self.dtype != Dtype::Uint16 {
                    return Err(config_err(
                        "quantization_range",
                        format!(
                            "\"fixed\" only applies to dtype = \"uint16\", dtype is \"{}\"",
                            self.dtype.name()
                        ),
                    ));
                }
                let mut bounds = [0.0; 2];
                for (slot, (key, value)) in bounds.iter_mut().zip([
                    ("quantization_min", self.quantization_min),
                    ("quantization_max", self.quantization_max),
                ]) {
                    match value {
                        None => {
                            return Err(config_err(key, "is required when quantization_range = \"fixed\""))
                        }
                        Some(v) if !v.is_finite() => {
                            return Err(config_err(
                                key,
                                format!("must be a finite number of metres, is {v}"),
                            ))
                        }
                        Some(v) => *slot = v,
                    }
                }
                let [min, max] = bounds;
                if min >= max {
                    return Err(config_err(
                        "quantization_max",
                        format!("must be greater than quantization_min ({min}), is {max}"),
                    ));
                }
                if !(max - min).is_finite() {
                    return Err(config_err(
                        "quantization_max",
                        format!("quantization_max - quantization_min overflows ({max} - {min})"),
                    ));
                }
            }
        }
        Ok(())
    }
}
