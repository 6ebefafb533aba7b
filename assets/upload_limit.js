/*
 * Uploads through their own route, told at once. dcc.Upload would read a file and send it as base64 in a callback's
 * body (a 152 MB model: 200 MB of JSON, silent for 90 s). Each upload of the app sits in a wrapper (app.ui.told_upload)
 * whose data attributes give its kind, its limit in bytes, the upload's id and the id of the message box under it;
 * this script, at the moment a file is chosen or dropped (capture phase, before the drop zone sees it), says in that
 * box why a file over the limit is refused (the same sentence the server would say), or sends each file to
 * /upload/<kind> (app/transfers.py: streamed to the session's folder) with its progress, and then hands the upload
 * the server's references as its contents, which its callback reads from the session. Plain ES2017, no dependency;
 * it writes the box and the upload with dash_clientside.set_props.
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

  function sessionId() {
    try {
      return JSON.parse(window.sessionStorage.getItem("session-id"));
    } catch (error) {
      return null;
    }
  }

  // one file through the upload route: resolves to the server's answer ({reference} or {message})
  function send(kind, file, progress) {
    return new Promise(function (resolve) {
      const request = new XMLHttpRequest();
      request.open("POST", "/upload/" + kind);
      request.setRequestHeader("X-CHMM-Session", sessionId() || "");
      request.setRequestHeader("X-CHMM-File-Name", encodeURIComponent(file.name));
      request.setRequestHeader("Content-Type", "application/octet-stream");
      request.upload.onprogress = function (event) {
        if (event.lengthComputable) progress(event.loaded);
      };
      request.onload = function () {
        let answer = null;
        try {
          answer = JSON.parse(request.responseText);
        } catch (error) {
          answer = null;
        }
        if (!answer || (!answer.reference && !answer.message)) {
          answer = { message: file.name + " could not be sent (the server answered " + request.status + "); try again." };
        }
        resolve(answer);
      };
      request.onerror = function () {
        resolve({ message: file.name + " could not be sent: the connection to the server failed; try again." });
      };
      request.send(file);
    });
  }

  async function sendAll(holder, box, files, total) {
    const kind = holder.getAttribute("data-upload-kind");
    const target = holder.getAttribute("data-upload-target");
    const multiple = holder.getAttribute("data-upload-multiple") === "true";
    const references = [];
    const names = [];
    let before = 0;
    for (const file of files) {
      const answer = await send(kind, file, function (loaded) {
        const share = total ? Math.floor((100 * (before + loaded)) / total) : 100;
        say(box, "Sending " + file.name + ": " + share + "% of " + formatBytes(total) + ".", "info");
      });
      if (!answer.reference) {
        say(box, answer.message, "error");
        return;
      }
      references.push(answer.reference);
      names.push(file.name);
      before += file.size;
    }
    say(box, "Sent " + formatBytes(total) + "; the server is reading it.", "info");
    window.dash_clientside.set_props(target, {
      contents: multiple ? references : references[0],
      filename: multiple ? names : names[0],
      last_modified: multiple ? files.map(function () { return Date.now(); }) : Date.now(),
    });
  }

  function check(event) {
    const target = event.target;
    if (!target || !target.closest) return;
    const holder = target.closest("[data-upload-limit]");
    if (!holder) return;
    const chosen = event.type === "drop" ? (event.dataTransfer && event.dataTransfer.files) : target.files;
    if (!chosen || !chosen.length) return;
    const files = Array.from(chosen);
    // the file goes through the upload route, never as base64 in a callback: the drop zone does not see it
    event.stopPropagation();
    event.preventDefault();
    if (event.type !== "drop") target.value = "";
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
    sendAll(holder, box, files, total);
  }

  document.addEventListener("change", check, true);
  document.addEventListener("drop", check, true);
})();
