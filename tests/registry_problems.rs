//! A binary whose declarations cannot all be enforced: `Module::init` (and a `TestModule`)
//! must refuse to start and report every problem at once, each with its fn and `file:line`.

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, Error, Module, Tier};

#[rate_limit(tier = "gold")]
async fn gold_only() -> Result<(), Error> {
    Ok(())
}

#[rate_limit]
async fn relies_on_the_default() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 5, window = "1m", name = "exports")]
async fn export_csv() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 50, window = "1m", name = "exports")]
async fn export_pdf() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 5, window = "1m", name = "imports")]
async fn import_csv() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 5, window = "1m", name = "imports")]
async fn import_pdf() -> Result<(), Error> {
    Ok(())
}

fn problems(err: &Error) -> Vec<(String, String)> {
    let Error::Declarations(e) = err else {
        panic!("{err}")
    };
    e.problems
        .iter()
        .map(|p| {
            assert!(p.file.ends_with("registry_problems.rs"), "{p}");
            (p.function.to_owned(), p.kind.to_string())
        })
        .collect()
}

#[test]
fn init_reports_every_problem_at_once() {
    let err = Module::builder()
        .no_default_limit()
        .tier(Tier::new("free", 1))
        .init()
        .unwrap_err();
    let found = problems(&err);
    let fns: Vec<_> = found.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fns,
        [
            "registry_problems::gold_only",
            "registry_problems::relies_on_the_default",
            "registry_problems::export_pdf",
        ],
        "{err}"
    );
    assert!(found[0]
        .1
        .contains("\"gold\" is not configured (configured tiers: free)"));
    assert!(found[1].1.contains("default limit"));
    assert!(
        found[2].1.contains("registry_problems::export_csv"),
        "{err}"
    );
    assert!(found[2].1.contains("5 per 1m"), "{err}");
    // Functions sharing a budget with the same settings are fine (`imports`).
    assert!(!err.to_string().contains("import_"), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("3 rate-limited fn(s) cannot be enforced"),
        "{text}"
    );
    assert!(!Module::is_initialized());
}

#[test]
fn fixing_the_config_leaves_only_the_conflict() {
    let err = Module::builder()
        .tier(Tier::new("gold", 1))
        .init()
        .unwrap_err();
    let found = problems(&err);
    assert_eq!(found.len(), 1, "{err}");
    assert_eq!(found[0].0, "registry_problems::export_pdf");
}

#[test]
fn test_modules_are_checked_the_same_way() {
    let err = TestModule::new(Module::builder().no_default_limit()).unwrap_err();
    assert_eq!(problems(&err).len(), 3, "{err}");
}

#[tokio::test]
async fn nothing_runs_when_init_failed() {
    assert!(Module::builder().init().is_err());
    for result in [
        gold_only().await,
        relies_on_the_default().await,
        export_csv().await,
        export_pdf().await,
        import_csv().await,
        import_pdf().await,
    ] {
        assert!(matches!(result, Err(Error::NotInitialized { .. })));
    }
}
