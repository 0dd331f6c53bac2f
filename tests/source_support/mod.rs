//! Reading the crate's own source with `syn`: which items are test-only and where a
//! `#[path]` module lives. Shared by the tests that walk `src/` (function_length,
//! string_errors).

/// `#[cfg(test)]`, `#[cfg(all(test, ...))]` or `#[test]`: code compiled only for tests.
/// (`cfg(any(test, ...))` is compiled without tests too, so it counts.)
pub fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") {
            return true;
        }
        if !path.is_ident("cfg") {
            return false;
        }
        let Ok(pred) = a.parse_args::<syn::Meta>() else {
            return false;
        };
        match pred {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(l) if l.path.is_ident("all") => l
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|args| args.iter().any(|m| m.path().is_ident("test"))),
            _ => false,
        }
    })
}

pub fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}
