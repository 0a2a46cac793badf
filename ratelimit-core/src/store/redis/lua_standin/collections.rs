//! The stand-in's list and hash commands: the sliding log's list and the sliding-window
//! counter's hash, as Redis 7 answers them (an emptied list or hash is deleted).

use std::collections::VecDeque;

use super::{int, position, Data, Db, Entry, Reply, WRONGTYPE};

/// The positions `start..=stop` of a list of `len` as Redis reads them (indices from the tail
/// when negative, clamped to the list), as a range from the head; empty when none.
fn span(start: i64, stop: i64, len: usize) -> (usize, usize) {
    let len = len as i64;
    let from = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let to = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if from > to || from >= len {
        (0, 0)
    } else {
        (from as usize, to as usize + 1)
    }
}

impl Db {
    /// The hash commands the sliding window counter uses.
    pub(super) fn hash_command(&mut self, name: &str, words: &[&str]) -> Result<Reply, String> {
        let (key, rest) = words.split_first().ok_or("ERR wrong number of arguments")?;
        let hash = match self.live(key) {
            None => None,
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Some(h),
            Some(_) => return Err(WRONGTYPE.to_owned()),
        };
        let held: &[(String, String)] = hash.as_deref().map_or(&[], |h| &h[..]);
        let get = |field: &str| held.iter().find(|(f, _)| f == field).map(|(_, v)| v);
        let bulk = |v: Option<&String>| v.map_or(Reply::Nil, |v| Reply::Bulk(v.clone()));
        match (name, rest) {
            ("HGET", [field]) => Ok(bulk(get(field))),
            ("HMGET", fields) if !fields.is_empty() => {
                Ok(Reply::Array(fields.iter().map(|f| bulk(get(f))).collect()))
            }
            ("HGETALL", []) => Ok(Reply::Array(
                held.iter()
                    .flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())])
                    .collect(),
            )),
            ("HDEL", fields) if !fields.is_empty() => {
                let Some(hash) = hash else {
                    return Ok(Reply::Int(0));
                };
                let before = hash.len();
                hash.retain(|(f, _)| !fields.contains(&f.as_str()));
                let gone = before - hash.len();
                if hash.is_empty() {
                    self.keys.remove(*key); // Redis deletes an emptied hash.
                }
                Ok(Reply::Int(gone as i64))
            }
            ("HINCRBY" | "HSET", [field, value]) => {
                let value = if name == "HSET" {
                    (*value).to_owned()
                } else {
                    let by = int(value)?;
                    let count = match get(field) {
                        None => 0,
                        Some(s) => int(s)
                            .ok()
                            .filter(|_| !s.starts_with('+') && s.trim() == s)
                            .ok_or("ERR hash value is not an integer")?,
                    };
                    count
                        .checked_add(by)
                        .ok_or("ERR increment or decrement would overflow")?
                        .to_string()
                };
                let Data::Hash(hash) = self.data_or(key, Data::Hash(Vec::new())) else {
                    unreachable!("checked above")
                };
                let added = match hash.iter_mut().find(|(f, _)| f == field) {
                    Some((_, v)) => {
                        *v = value.clone();
                        false
                    }
                    None => {
                        hash.push(((*field).to_owned(), value.clone()));
                        true
                    }
                };
                Ok(match name {
                    "HSET" => Reply::Int(i64::from(added)),
                    _ => Reply::Int(int(&value)?),
                })
            }
            _ => Err(format!("ERR {name} {words:?}: not in the stand-in")),
        }
    }

    /// The list commands the sliding log uses.
    pub(super) fn list_command(&mut self, name: &str, words: &[&str]) -> Result<Reply, String> {
        let (key, rest) = words.split_first().ok_or("ERR wrong number of arguments")?;
        let list = self.list(key)?;
        let held = list.as_ref().map_or(0, |l| l.len());
        match (name, rest) {
            ("LLEN", []) => Ok(Reply::Int(held as i64)),
            ("LINDEX", [index]) => Ok(match (list, position(int(index)?, held)) {
                (Some(l), Some(at)) => Reply::Bulk(l[at].clone()),
                _ => Reply::Nil,
            }),
            ("LPUSH", [value]) => {
                let Data::List(list) = self.data_or(key, Data::List(VecDeque::new())) else {
                    unreachable!("checked above")
                };
                list.push_front((*value).to_owned());
                Ok(Reply::Int(list.len() as i64))
            }
            ("LPOP", []) => {
                let Some(list) = list else {
                    return Ok(Reply::Nil);
                };
                let popped = list.pop_front().map_or(Reply::Nil, Reply::Bulk);
                if list.is_empty() {
                    self.keys.remove(*key); // Redis deletes an emptied list.
                }
                Ok(popped)
            }
            ("LRANGE", [start, stop]) => {
                let (from, to) = span(int(start)?, int(stop)?, held);
                let items = list.map_or(Vec::new(), |l| l.range(from..to).cloned().collect());
                Ok(Reply::Array(items.into_iter().map(Reply::Bulk).collect()))
            }
            ("LSET", [index, value]) => {
                let list = list.ok_or("ERR no such key")?;
                let at = position(int(index)?, held).ok_or("ERR index out of range")?;
                list[at] = (*value).to_owned();
                Ok(Reply::Status("OK".to_owned()))
            }
            ("LREM", [count, value]) => {
                let count = int(count)?;
                let Some(list) = list else {
                    return Ok(Reply::Int(0));
                };
                // From the head when positive, from the tail when negative, all when 0.
                let most = if count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let matching = (0..held).filter(|&i| list[i] == *value);
                let mut gone: Vec<usize> = if count < 0 {
                    matching.rev().take(most).collect()
                } else {
                    matching.take(most).collect()
                };
                gone.sort_unstable();
                for &i in gone.iter().rev() {
                    list.remove(i);
                }
                if list.is_empty() {
                    self.keys.remove(*key); // Redis deletes an emptied list.
                }
                Ok(Reply::Int(gone.len() as i64))
            }
            ("LTRIM", [start, stop]) => {
                let (start, stop) = (int(start)?, int(stop)?);
                let Some(list) = list else {
                    return Ok(Reply::Status("OK".to_owned()));
                };
                let (from, to) = span(start, stop, held);
                list.truncate(to);
                list.drain(..from);
                if list.is_empty() {
                    self.keys.remove(*key); // Redis deletes an emptied list.
                }
                Ok(Reply::Status("OK".to_owned()))
            }
            _ => Err(format!("ERR {name} {words:?}: not in the stand-in")),
        }
    }
}
