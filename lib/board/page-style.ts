// The board page's stylesheet, inline in the page (the CSP allows inline styles and nothing else).
// Phone first: one column at 390 px, blocks side by side on wide screens; tables stack into cards on
// a phone (`.cards`; narrow `.fit` ones stay tables) and scroll inside their block on a wide screen,
// long words wrap, so the page itself never scrolls sideways. Light and dark follow the system.

export const PAGE_CSS = `
:root{--bg:#f6f7f9;--card:#fff;--fg:#16181d;--muted:#5f6673;--line:#e1e4ea;--accent:#2f6fde;--ok:#17803d;--warn:#a15c00;--bad:#c53030;--track:#e8ebf0;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#0f1115;--card:#181b21;--fg:#e6e8ec;--muted:#9aa2af;--line:#2a2f38;--accent:#6ea0ff;--ok:#3fbf7f;--warn:#f0b44c;--bad:#ff6b6b;--track:#2a2f38}}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;overflow-wrap:anywhere}
a{color:var(--accent)}
.top{padding:14px 14px 4px}
.top h1{margin:0;font-size:22px}
.muted,.note{color:var(--muted);font-size:13px}
main{padding:8px;display:grid;gap:10px;grid-template-columns:minmax(0,1fr);align-items:start}
@media (min-width:900px){main{grid-template-columns:repeat(2,minmax(0,1fr))}#spend,#models,#sessions,#benchmark_runs,.glance,.notice{grid-column:1/-1}}
@media (min-width:1400px){main{grid-template-columns:repeat(3,minmax(0,1fr))}}
section,.glance,.notice{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px;min-width:0}
section h2{margin:0 0 8px;font-size:17px}
h3{margin:10px 0 6px;font-size:14px}
.notice{margin:0;border-color:var(--accent)}
.glance{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:8px;padding:10px}
@media (min-width:640px){.glance{grid-template-columns:repeat(4,minmax(0,1fr))}}
.glance div{display:flex;flex-direction:column}
.glance span{color:var(--muted);font-size:12px}
.glance b{font-size:20px}
.warn{color:var(--warn)}
.empty{color:var(--muted);margin:4px 0}
.profiles{display:grid;gap:10px;grid-template-columns:repeat(auto-fill,minmax(min(100%,300px),1fr))}
.profile{border:1px solid var(--line);border-radius:8px;padding:10px;min-width:0}
.profile>header{display:flex;justify-content:space-between;align-items:center;gap:8px}
.profile h3{margin:0;font-size:16px}
.badge{font-size:12px;padding:1px 8px;border-radius:999px;border:1px solid currentColor;white-space:nowrap}
.badge-ok{color:var(--ok)}.badge-warn{color:var(--warn)}.badge-bad{color:var(--bad)}.badge-muted{color:var(--muted)}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.pair{display:grid;gap:0 16px;grid-template-columns:repeat(auto-fit,minmax(min(100%,160px),1fr))}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.meter{margin-top:8px}
.meter-head{display:flex;justify-content:space-between;gap:8px;font-size:13px;flex-wrap:wrap}
.bar{display:block;width:100%;height:12px;margin-top:3px}
.bar-track{fill:var(--track)}
.bar-fill{fill:var(--ok)}
.bar-fast-only .bar-fill,.bar-max-tokens .bar-fill{fill:var(--warn)}
.bar-blocked .bar-fill{fill:var(--bad)}
.bar-mark{stroke:var(--muted);stroke-width:.4;stroke-dasharray:1 1;vector-effect:non-scaling-stroke}
.reset{margin:6px 0 0;font-size:13px}
dl.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,150px),1fr));gap:6px 12px;margin:6px 0}
dl.kv div{min-width:0}
dl.kv div.wide{grid-column:1/-1}
dt{color:var(--muted);font-size:12px}
dd{margin:0;font-variant-numeric:tabular-nums}
.sub{margin-top:6px;min-width:0}
.series{display:grid;gap:6px 14px;grid-template-columns:repeat(2,minmax(0,1fr))}
.series .note,.series details{grid-column:1/-1;margin:0}
figure{margin:0;min-width:0}
figcaption{display:flex;justify-content:space-between;gap:8px;font-size:13px}
figcaption span{color:var(--muted)}
figcaption b{white-space:nowrap}
.spark{display:block;width:100%;height:40px}
.spark-line{stroke:var(--accent);stroke-width:1.5}
.spark-area{fill:var(--accent);opacity:.15}
.spark-dot{fill:var(--accent)}
details{margin-top:6px}
details summary{cursor:pointer;color:var(--accent);font-size:13px;padding:4px 0}
.scroll{overflow-x:auto;max-width:100%;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;width:100%;font-size:13px;font-variant-numeric:tabular-nums}
caption{text-align:left;color:var(--muted)}
th,td{text-align:left;padding:4px 8px 4px 0;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;white-space:nowrap}
td{white-space:nowrap}
td.key,td.wide{white-space:normal;overflow-wrap:anywhere}
td.key{font-weight:600;min-width:14ch}
.fit td.key{min-width:0;white-space:nowrap}
footer{padding:4px 14px 20px}
@media (max-width:640px){
.cards table,.cards tbody,.cards tr{display:block;width:100%}
.cards td{display:block}
.cards thead{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%)}
.cards tr{display:flex;flex-wrap:wrap;gap:4px 16px;padding:8px 0;border-bottom:1px solid var(--line)}
.cards td{flex:1 1 auto;min-width:min(64px,100%);border:0;padding:0;white-space:normal;overflow-wrap:break-word}
.cards td.key,.cards td.wide{flex-basis:100%;min-width:0;overflow-wrap:anywhere}
.cards td.key{font-size:14px}
.cards td:not(.key)::before{content:attr(data-label);display:block;color:var(--muted);font-size:11px;line-height:1.3}
.fit table{font-size:12.5px}
.fit th,.fit td{padding-right:6px}
}
`;
