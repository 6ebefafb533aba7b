/*
 * Uploads told at once (issue 51, item 2). dcc.Upload refuses a file over its max_size without a word (its drop zone
 * drops it), and a file within it is read and sent as base64 before the server answers: a 152 MB model showed nothing
 * for 90 s. Each upload of the app sits in a wrapper (app.ui.told_upload) whose data attributes give its limit in
 * bytes, the id of the message box under it and the sentences to say; this script, at the moment a file is chosen or
 * dropped (capture phase, before the drop zone), says in that box either why the file is refused (over the limit:
 * the same sentence the server would say) or that it is being sent, with its size. The server's own answer replaces
 * the latter when it comes. Plain ES2017, no dependency; it writes the box with dash_clientside.set_props.
 */
(function () {
  "use strict";

  // the app's units (app.config.format_bytes): decimal, one decimal place, "bytes" below 1 kB
  function formatBytes(n) {
    const units = ["bytes", "kB", "MB", "GB", "TB", "PB"];
    let value = n;
    for (let i = 0; i < units.length; i++) {
      if (Math.abs(value) < 1000 || i === units.length - 1) {
        if (i === 0) return value.toLocaleString("en-US") + " bytes";
        return value.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) + " " + units[i];
      }
      value /= 1000;
    }
    return String(n);
  }

  function over(size, limit) {
    if (formatBytes(size) === formatBytes(limit)) {
      return size.toLocaleString("en-US") + " bytes, the limit is " + limit.toLocaleString("en-US") + " bytes";
    }
    return formatBytes(size) + ", the limit is " + formatBytes(limit);
  }

  function say(box, text, kind) {
    if (!window.dash_clientside || !window.dash_clientside.set_props) return;
    const message = {
      type: "Div",
      namespace: "dash_html_components",
      props: { children: text, className: "message message-" + kind, role: kind === "error" ? "alert" : "status" },
    };
    window.dash_clientside.set_props(box, { children: message });
  }

  function check(event) {
    const target = event.target;
    if (!target || !target.closest) return;
    const holder = target.closest("[data-upload-limit]");
    if (!holder) return;
    const files = event.type === "drop" ? (event.dataTransfer && event.dataTransfer.files) : target.files;
    if (!files || !files.length) return;
    const limit = Number(holder.getAttribute("data-upload-limit"));
    const box = holder.getAttribute("data-upload-message");
    const remedy = holder.getAttribute("data-upload-remedy") || "";
    let total = 0;
    for (const file of files) {
      total += file.size;
      if (file.size > limit) {
        say(box, file.name + " is too large: " + over(file.size, limit) + remedy + ".", "error");
        return;
      }
    }
    if (files.length > 1 && total > limit) {
      say(box, "These " + files.length + " files are too large together: " + over(total, limit) + remedy + ".", "error");
      return;
    }
    const what = files.length > 1 ? files.length + " files (" + formatBytes(total) + ")" : files[0].name + " (" +
      formatBytes(total) + ")";
    say(box, "Sending " + what + " to the server; it says what it made of it when it has read it.", "info");
  }

  document.addEventListener("change", check, true);
  document.addEventListener("drop", check, true);
})();
