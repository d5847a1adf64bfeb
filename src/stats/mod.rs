//! What the node, its pods and their containers use: the metric advisor's latest
//! readings ([`readings`]), from which the Summary API and the resource metrics are
//! served.

pub(crate) mod readings;
