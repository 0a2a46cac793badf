use ratelimit::rate_limit;

#[rate_limit(limit = 1)]
struct Service {
    field: u32,
}

fn main() {
    let s = Service { field: 1 };
    let _ = s.field;
}
