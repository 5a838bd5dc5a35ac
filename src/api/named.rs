//! What the counting of requests needs of a request body: the model it
//! names. A leaf module, so that the wire types can say it without
//! importing the request record.

/// A request body that names a model (every counted request's does).
pub trait NamesModel {
    fn model(&self) -> &str;
}
