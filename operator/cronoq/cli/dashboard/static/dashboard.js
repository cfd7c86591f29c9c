// The dashboard's own script: draws the dependency graph with Cytoscape (again after htmx
// swaps the part it lives in), and shows whether the live event stream is connected.
(function () {
  const colors = {
    Succeeded: "#2e7d32", Failed: "#c62828", DeadLettered: "#6a1b9a", Cancelled: "#757575", Skipped: "#9e9e9e",
    Running: "#1565c0", Retrying: "#ef6c00", Queued: "#f9a825", Blocked: "#8d6e63", Pending: "#bdbdbd",
    Missing: "#ffffff",
  };

  function drawGraph(root) {
    const box = (root || document).querySelector("#graph");
    if (!box || typeof cytoscape === "undefined") return;
    const cy = cytoscape({
      container: box,
      elements: JSON.parse(box.dataset.elements),
      layout: { name: "breadthfirst", directed: true, spacingFactor: 1.1 },
      userZoomingEnabled: false,
      style: [
        { selector: "node", style: {
            "label": "data(label)", "text-wrap": "wrap", "text-valign": "center", "font-size": 11,
            "shape": "round-rectangle", "width": "label", "height": "label", "padding": 8,
            "background-color": (n) => colors[n.data("phase")] || "#bdbdbd",
            "color": "#fff", "text-outline-width": 1, "text-outline-color": "#333",
            "border-width": (n) => (n.data("root") ? 3 : 1), "border-color": "#111" } },
        { selector: "edge", style: {
            "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 2, "line-color": "#888",
            "target-arrow-color": "#888", "label": "data(label)", "font-size": 9, "text-rotation": "autorotate",
            "text-wrap": "wrap", "text-max-width": 220 } },
      ],
    });
    cy.on("tap", "node", (event) => {
      const ns = location.pathname.split("/")[2];
      location.href = "/tasks/" + ns + "/" + encodeURIComponent(event.target.id());
    });
  }

  document.addEventListener("DOMContentLoaded", () => drawGraph(document));
  document.body.addEventListener("htmx:afterSettle", (event) => {
    if (event.detail.target && event.detail.target.id === "live") drawGraph(event.detail.target);
  });
  const state = document.getElementById("live-state");
  let stream = null;
  document.body.addEventListener("htmx:sseOpen", (event) => {
    stream = event.detail.source;
    state.textContent = "live"; state.className = "live-state on";
  });
  document.body.addEventListener("htmx:sseError", () => { state.textContent = "reconnecting"; state.className = "live-state off"; });
  // A browser opens at most 6 connections per host over HTTP/1.1, and each page's event stream
  // holds one: a tab in the background lets go of its stream, and reloads when shown again.
  let closed = false;
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden" && stream) {
      stream.close();
      closed = true;
      state.textContent = "paused"; state.className = "live-state";
    } else if (document.visibilityState === "visible" && closed) {
      location.reload();
    }
  });
})();
