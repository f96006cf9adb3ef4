// Renders this gateway's own /openapi.json. validatorUrl is off so the page never calls a
// third-party validator: everything it loads comes from the gateway.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#api-reference",
    deepLinking: true,
    validatorUrl: null,
    tryItOutEnabled: false,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
