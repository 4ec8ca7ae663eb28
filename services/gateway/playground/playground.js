// The widebeam playground: pick items (GET /v1/items), build a history, ask POST /v1/recommend.
// The API key lives in this browser's localStorage and goes out as "Authorization: Bearer KEY".
"use strict";

const KEY_STORAGE = "widebeam.playground.apiKey";
const HISTORY_STORAGE = "widebeam.playground.history";
const SEARCH_PAGE = 10;
const SEARCH_DELAY_MS = 250;

const $ = (id) => document.getElementById(id);
const known = new Map(); // item id -> {title, sid} from the item search
let history = [];
let searchTimer = null;
let searchNext = null; // {query, offset} of the next page, or null

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function call(method, path, body) {
  const init = { method, headers: headers(body !== undefined) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const reply = await fetch(path, init);
  const data = await reply.json().catch(() => ({}));
  if (!reply.ok) {
    const message = (data.error && data.error.message) || reply.statusText;
    throw new Error(reply.status + ": " + message);
  }
  return data;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function button(label, onClick, title) {
  const b = element("button", label);
  b.type = "button";
  if (title) b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

function titleOf(itemId) {
  const item = known.get(itemId);
  return item && item.title ? item.title : "";
}

function remember(items) {
  for (const item of items) known.set(item.item_id, { title: item.title, sid: item.sid });
}

// ----- history ------------------------------------------------------------------------------
function saveHistory() {
  localStorage.setItem(HISTORY_STORAGE, JSON.stringify(history));
  renderHistory();
}

function addToHistory(itemId) {
  if (!itemId) return;
  history.push(itemId);
  saveHistory();
}

function renderHistory() {
  const list = $("history");
  list.replaceChildren();
  history.forEach((itemId, index) => {
    const li = element("li");
    li.dataset.itemId = itemId;
    li.append(element("span", itemId, "id"), element("span", titleOf(itemId), "title"));
    li.append(button("×", () => { history.splice(index, 1); saveHistory(); }, "remove"));
    list.append(li);
  });
}

async function fillTitles(itemIds) {
  const missing = [...new Set(itemIds)].filter((id) => !known.has(id)).slice(0, 100);
  if (!missing.length) return;
  const query = missing.map((id) => "id=" + encodeURIComponent(id)).join("&");
  try {
    remember((await call("GET", "/v1/items?" + query)).items);
  } catch (err) {
    // Titles are optional (a gateway without an items file): ids alone still work.
  }
  for (const id of missing) if (!known.has(id)) known.set(id, { title: null, sid: null });
}

// ----- item search --------------------------------------------------------------------------
async function search(query, offset) {
  const list = $("search-results");
  const params = new URLSearchParams({ q: query, offset: String(offset), limit: String(SEARCH_PAGE) });
  try {
    const page = await call("GET", "/v1/items?" + params);
    if ($("search").value.trim() !== query) return; // typed on meanwhile
    showError("");
    remember(page.items);
    if (offset === 0) list.replaceChildren();
    for (const item of page.items) {
      const li = element("li");
      li.dataset.itemId = item.item_id;
      li.append(element("span", item.item_id, "id"), element("span", item.title || "", "title"));
      li.append(button("Add", () => addToHistory(item.item_id), "add to the history"));
      list.append(li);
    }
    if (!page.items.length && offset === 0) list.append(element("li", "no item matches", "muted"));
    searchNext = page.next_offset === null ? null : { query, offset: page.next_offset };
    $("search-more").hidden = searchNext === null;
  } catch (err) {
    list.replaceChildren(element("li", "search failed: " + err.message, "error"));
    $("search-more").hidden = true;
  }
}

function scheduleSearch() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => search($("search").value.trim(), 0), SEARCH_DELAY_MS);
}

// ----- recommend ----------------------------------------------------------------------------
function requestBody() {
  const body = {
    history,
    n: Number($("n").value) || 10,
    catalog: $("catalog").value.trim() || "default",
    exclude: $("exclude").value.split(",").map((s) => s.trim()).filter(Boolean),
    exclude_history: $("exclude-history").checked,
    skip_unknown_items: $("skip-unknown").checked,
  };
  const beam = $("beam-width").value.trim();
  if (beam) body.beam_width = Number(beam);
  return body;
}

async function recommend() {
  const started = performance.now();
  $("recommend").disabled = true;
  showError("");
  try {
    const reply = await call("POST", "/v1/recommend", requestBody());
    const roundTrip = performance.now() - started;
    await fillTitles([...reply.items.map((i) => i.item_id), ...history]);
    renderHistory();
    renderResults(reply, roundTrip);
  } catch (err) {
    showError("recommend failed: " + err.message);
  } finally {
    $("recommend").disabled = false;
  }
}

function renderResults(reply, roundTripMs) {
  const body = $("results").querySelector("tbody");
  body.replaceChildren();
  reply.items.forEach((item, rank) => {
    const tr = element("tr");
    tr.dataset.itemId = item.item_id;
    tr.append(
      element("td", rank + 1),
      element("td", item.item_id, "id"),
      element("td", titleOf(item.item_id), "title"),
      element("td", item.sid.join(","), "sid"),
      element("td", item.score.toFixed(4), "score"),
    );
    const add = element("td");
    add.append(button("Add", () => addToHistory(item.item_id), "add to the history"));
    tr.append(add);
    body.append(tr);
  });
  $("results").hidden = false;
  const skipped = reply.skipped_history_item_ids.length
    ? ` · skipped unknown: ${reply.skipped_history_item_ids.join(", ")}` : "";
  $("result-meta").textContent =
    `${reply.items.length} items · catalog ${reply.catalog.name} version ${reply.catalog.version}` +
    ` · model ${reply.model} · beam width ${reply.beam_width}` +
    ` · latency ${reply.latency_ms.toFixed(1)} ms (gateway), ${roundTripMs.toFixed(0)} ms (round trip)` +
    (reply.exhausted ? " · the catalog has no more items" : "") + skipped;
  $("result-meta").dataset.catalogVersion = reply.catalog.version;
}

// ----- gateway status -----------------------------------------------------------------------
async function showStatus() {
  try {
    const reply = await fetch("/readyz");
    const data = await reply.json();
    if (reply.ok) {
      const catalogs = Object.entries(data.catalogs).map(([n, v]) => `${n} (version ${v})`).join(", ");
      $("status").textContent = `ready · model ${data.model} · catalogs: ${catalogs}`;
    } else {
      $("status").textContent = "not ready: " + (data.reason || reply.statusText);
    }
  } catch (err) {
    $("status").textContent = "the gateway does not answer: " + err.message;
  }
}

function start() {
  $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  $("api-key").addEventListener("input", () => {
    localStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
    if ($("search").value.trim()) scheduleSearch();
  });
  try {
    const stored = JSON.parse(localStorage.getItem(HISTORY_STORAGE) || "[]");
    history = Array.isArray(stored) ? stored.filter((id) => typeof id === "string") : [];
  } catch (err) {
    history = [];
  }
  $("search").addEventListener("input", scheduleSearch);
  $("search").addEventListener("keydown", (event) => {
    if (event.key === "Enter") search($("search").value.trim(), 0);
  });
  $("search-more").addEventListener("click", () => {
    if (searchNext) search(searchNext.query, searchNext.offset);
  });
  $("add-typed").addEventListener("click", () => addToHistory($("search").value.trim()));
  $("clear-history").addEventListener("click", () => { history = []; saveHistory(); });
  $("recommend").addEventListener("click", recommend);
  renderHistory();
  fillTitles(history).then(renderHistory);
  search("", 0); // the catalog's first items, to pick from at once
  showStatus();
}

document.addEventListener("DOMContentLoaded", start);
