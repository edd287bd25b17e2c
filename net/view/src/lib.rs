//! Migratory's browser viewer's assets: its files (`net/view/web/`, embedded, nothing to
//! build or install) with the terrain image they draw, served by the live server at `/`
//! and by the replay viewer over a recording (`migratory-replay view REC`, in the replay
//! crate), which answers the same page's questions about any tick from a cursor world.
//!
//! Modules: `assets` (the files, `/viewer/terrain`), `replay_layout` (the layouts and
//! codes the page reads from the replay viewer), `layout_js` (the page's `layout.js`,
//! generated from the Rust layouts). The byte layouts the page reads are specified in
//! those modules' docs.
//!
//! Invariant: the viewer only reads. It never writes a recording and never steps a live
//! world; the live server hands it a finished terrain image and nothing else.

mod assets;
mod layout_js;
mod replay_layout;

pub use assets::{
    live_routes, terrain_image, terrain_layout, VIEWER_TERRAIN_EDGE_MAX, VIEWER_TERRAIN_VERSION,
};
pub use layout_js::layout_js;
pub use replay_layout::{marker, state_layout, REPLAY_ENTITY_BYTES};
