//! Migratory's browser viewer: its files (`net/view/web/`, embedded, nothing to build or
//! install) with the terrain image they draw, served by the live server at `/`; and the
//! replay viewer over a recording (`migratory-server view REC`), which answers the same
//! page's questions about any tick from a cursor world.
//!
//! Modules: `assets` (the files, `/viewer/terrain`), `replay` (the replay viewer: its
//! reader thread, the background analysis, its errors), `layout_js` (the page's
//! `layout.js`, generated from the Rust layouts). The byte layouts the page reads
//! are specified in those modules' docs.
//!
//! Invariant: the viewer only reads. It never writes a recording and never steps a live
//! world; the live server hands it a finished terrain image and nothing else.

mod assets;
mod layout_js;
mod replay;

pub use assets::{
    live_routes, terrain_image, terrain_layout, VIEWER_TERRAIN_EDGE_MAX, VIEWER_TERRAIN_VERSION,
};
pub use layout_js::layout_js;
pub use replay::{
    marker, state_layout, view, Compare, QuestionError, ViewError, ViewHandle, REPLAY_ENTITY_BYTES,
    TRACK_SECONDS,
};
